"""The tune command: a measured search over a variant's server settings.

Typer declarations; the launch (`up`/`down`, verified and locked) and the traffic client come
from the composition root (cli/root.py), the bench from the traffic room.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, console, image_ref, within
from opsctl.tune.settings import TUNE_DEFAULTS as _D


@app.command()
def tune(
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    param: Annotated[list[str], typer.Option("--param", help="NAME=v1,v2: a server setting "
                     "(a typed profile field, e.g. cuda_graph_max_bs) and its values; repeat "
                     "for several knobs (the grid is every combination).")] = [],  # noqa: B006
    budget: Annotated[float | None, typer.Option("--budget", callback=within(0.1, 7 * 24 * 60),
                      help="Minutes for the "
                      "whole search; when the grid does not fit, successive halving "
                      "(docs/trace-and-tune.md); 0.1 to 10080 (a week).")] = _D.budget_minutes,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Concurrency of "
                           "each point's bench (the load you serve).")] = _D.concurrency,
    requests: Annotated[int, typer.Option("--requests", min=4, help="Measured requests per "
                        "point (halving rungs use fewer).")] = _D.requests,
    input_words: Annotated[int, typer.Option(min=1, help="Prompt length in words.")
                           ] = _D.input_words,
    output_tokens: Annotated[int, typer.Option(min=2, help="Output tokens per request.")
                             ] = _D.output_tokens,
    request_timeout: Annotated[float, typer.Option(help="Seconds per request.",
                                                   callback=within(0.01, 86400))
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
    from opsctl.tune.settings import TuneSettings
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
