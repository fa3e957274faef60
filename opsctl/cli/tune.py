"""The tune command: a measured search over a variant's server settings.

Typer declarations; the launch (`up`/`down`, verified and locked) and the traffic client come
from the composition root (cli/root.py), the bench from the traffic room.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, console, image_ref
from opsctl.cli.knobs import knob
from opsctl.tune.settings import TUNE_DEFAULTS as _D
from opsctl.tune.settings import TuneSettings


def _tune(name: str, *flags: str, **extra: str) -> object:
    return knob(TuneSettings, name, *flags, **extra)


@app.command()
def tune(
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    param: Annotated[list[str], typer.Option("--param", help="NAME=v1,v2: a server setting "
                     "(a typed profile field, e.g. cuda_graph_max_bs) and its values; repeat "
                     "for several knobs (the grid is every combination).")] = [],  # noqa: B006
    budget: Annotated[float | None, _tune("budget_minutes", "--budget")] = _D.budget_minutes,
    concurrency: Annotated[int, _tune("concurrency", "--concurrency")] = _D.concurrency,
    requests: Annotated[int, _tune("requests", "--requests")] = _D.requests,
    input_words: Annotated[int, _tune("input_words", "--input-words",
                                      help="Prompt length in words.")] = _D.input_words,
    output_tokens: Annotated[int, _tune("output_tokens", "--output-tokens")] = _D.output_tokens,
    request_timeout: Annotated[float, _tune("request_timeout_s", "--request-timeout")
                               ] = _D.request_timeout_s,
    out: Annotated[str | None, typer.Option("--out", help="Run directory (default "
                   "out/tune-<UTC time>/): tune-state.json, tune.md, tpot.png, "
                   "best-variant.yaml.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --out (default: "
                      "the newest out/tune-*/) after an interruption.")] = False,
    image: Annotated[str | None, typer.Option(help="Run this image instead of the one "
                     "`opsctl build` made.", callback=image_ref)] = None,
) -> None:
    """Grid (or successive halving) over server settings: per point up -> verify -> short bench
    -> down; points that fail to start are recorded with the reason and skipped. Writes the
    table, a chart and the best point as a variant overlay to paste into the profile.

    Exit 0 a best point found, 2 bad usage, 4 the engine or image is missing, 5 no point ran
    successfully, 130 interrupted (the state is kept: --resume).
    """
    from opsctl.cli.root import Root
    from opsctl.config.profiles import load_profile
    from opsctl.core.errors import SmokeError, UsageError
    from opsctl.core.files import check_output_path
    from opsctl.core.redact import api_key_from_env
    from opsctl.core.reports import REPORTS_DIR, stamp
    from opsctl.tune import app as tune_app
    from opsctl.tune import view
    from opsctl.tune.runner import DeployRunner
    from opsctl.tune.state import TUNE_DIR_PREFIX, latest_run

    if not param:
        raise UsageError("tune needs at least one --param NAME=v1,v2",
                         hint="e.g. --param cuda_graph_max_bs=16,32 --param "
                         "mem_fraction_static=0.85,0.9")
    deployment = load_profile(profile).resolve(variant)
    if out:
        out_dir = check_output_path(Path(out), "--out", directory=True)
    else:
        out_dir = latest_run() if resume else REPORTS_DIR / f"{TUNE_DIR_PREFIX}{stamp()}"
    settings = TuneSettings(concurrency=concurrency, requests=requests, input_words=input_words,
                            output_tokens=output_tokens, request_timeout_s=request_timeout,
                            budget_minutes=budget)
    request = tune_app.TuneRequest(params=tuple(param), out_dir=out_dir, settings=settings,
                                   resume=resume)
    tune_app.plan(request, deployment)  # bad knobs or a grid past the limits: exit 2 first
    root = Root(image)
    runner = DeployRunner(launch=root.launch(), settings=settings, api_key=api_key_from_env(),
                          client_factory=root.client_factory)
    result = tune_app.tune(request, deployment, runner=runner, clock=root.clock,
                           plot=view.write_chart, on_start=view.on_start(console),
                           on_done=view.on_done(console))
    view.show_result(result, console)
    if result.best is None:
        raise SmokeError(f"no point of {result.points} ran successfully; see {out_dir}",
                         hint="the reasons are in tune.md; widen or move the values")
