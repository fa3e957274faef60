"""The decide command: every variant through the gates and a sweep, and which one to run.

Typer declarations; the collaborators (the launch, the gate's smoke, the bench sweep) come from
the composition root (cli/root.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, app, console, err_console, image_ref
from opsctl.cli.knobs import (
    ApiOpt,
    DatasetNameOpt,
    DatasetPathOpt,
    ExtraBodyOpt,
    GspGroupsOpt,
    GspPrefixOpt,
    GspPromptsOpt,
    InputWordsOpt,
    IslOslOpt,
    MultiTurnOpt,
    OutputTokensOpt,
    RangeRatioOpt,
    SeedOpt,
    TokenizerOpt,
    TraceScaleOpt,
    knob,
    workload,
)
from opsctl.decide.settings import DECIDE_DEFAULTS as _D
from opsctl.decide.settings import QUICK, DecideSettings


def _decide(name: str, *flags: str) -> object:
    return knob(DecideSettings, name, *flags)


@app.command()
def decide(
    ctx: typer.Context,
    profile: ProfileOpt = None,
    variants: Annotated[str | None, typer.Option("--variants", help="Comma-separated variants, "
                        "run in this order (default: every variant of the profile).")] = None,
    concurrency: Annotated[str | None, _decide("concurrency", "--concurrency")] = None,
    requests: Annotated[int | None, _decide("requests_per_level", "--requests")
                        ] = _D.requests_per_level,
    out: Annotated[str | None, typer.Option("--out", help="Run directory (default "
                   "out/decide-<UTC time>/): decide.json, decide.md and one folder of evidence "
                   "per variant.")] = None,
    skip_eval: Annotated[bool, _decide("skip_eval", "--skip-eval")] = _D.skip_eval,
    timeout: Annotated[float | None, _decide("timeout_s", "--timeout")] = _D.timeout_s,
    image: Annotated[str | None, typer.Option(help="Run every variant on this image instead of "
                     "the ones `opsctl build` made (for variants that share one image).",
                     callback=image_ref)] = None,
    repeats: Annotated[int, _decide("repeats", "--repeats")] = _D.repeats,
    quick: Annotated[bool, _decide("quick", "--quick")] = _D.quick,
    input_words: InputWordsOpt = _D.input_words,
    output_tokens: OutputTokensOpt = _D.output_tokens,
    api: ApiOpt = _D.api,
    dataset_name: DatasetNameOpt = None,
    dataset_path: DatasetPathOpt = None,
    tokenizer: TokenizerOpt = None,
    seed: SeedOpt = _D.seed,
    gsp_groups: GspGroupsOpt = _D.gsp_groups,
    gsp_prompts_per_group: GspPromptsOpt = _D.gsp_prompts_per_group,
    gsp_prefix_len: GspPrefixOpt = _D.gsp_prefix_len,
    multi_turn: MultiTurnOpt = _D.multi_turn,
    trace_scale: TraceScaleOpt = _D.trace_scale,
    random_range_ratio: RangeRatioOpt = _D.range_ratio,
    isl_osl: IslOslOpt = None,
    extra_request_body: ExtraBodyOpt = None,
    margin: Annotated[float | None, _decide("margin_percent", "--margin")] = None,
    rescore: Annotated[str | None, typer.Option("--rescore", help="Judge the decide run in this "
                       "directory again from its files (nothing is launched): by --goodput, else "
                       "the profile's SLO, and --margin; writes decide-rescored.json/.md "
                       "there.")] = None,
    goodput: Annotated[list[str] | None, typer.Option("--goodput", help="With --rescore: a good "
                       "request's limit, ttft:MS or tpot:MS (repeatable), instead of the "
                       "profile's SLO.")] = None,
) -> None:
    """Which variant is correct and fastest on this box, with evidence.

    Per variant, one at a time (one box holds one server): stop what runs, up (verified against
    the profile), smoke with the profile's evals (GSM8K, long-context probes), a bench sweep,
    down. A variant that does not start, verify or pass smoke is disqualified with its reason and
    evidence; the run goes on. Greedy outputs of variants computing the same attention are
    compared pairwise (a disagreement is reported, not a disqualification). Each variant is
    swept --repeats times, interleaved with the others; figures carry bootstrap 95% intervals
    from the per-request records. The winner, by SLO goodput: among qualified variants, the
    highest concurrency that meets the profile's SLO without a failed request, then the higher
    throughput there; inside --margin it is a tie, and the verdict says what would separate
    them. Nothing runs afterwards.

    Exit 0 a recommendation (or a tie), 2 bad usage, 4 (6 without Docker) no variant could start, 5
    no variant qualified, 130 interrupted (the server removed, a partial report written).
    """
    from pathlib import Path

    from opsctl.cli.root import Root
    from opsctl.config.profiles import load_profile
    from opsctl.core.files import check_output_path
    from opsctl.core.reports import REPORTS_DIR, default_decide_dir
    from opsctl.decide import app as decide_app
    from opsctl.decide import view
    from opsctl.deploy import view as deploy_view
    from opsctl.traffic.app import check_sweep
    from opsctl.traffic.bench.sweep import parse_concurrency, parse_variants

    if rescore is not None:
        _rescore(Path(rescore), profile, goodput or [], None if margin is None else margin / 100.0)
        return
    check_output_path(Path(out) if out else REPORTS_DIR, "--out", directory=True)
    given = {"concurrency": parse_concurrency(concurrency) if concurrency else _D.concurrency,
             "requests_per_level": requests, "repeats": repeats, "output_tokens": output_tokens}
    if quick:  # the quick values where the option was not given
        given |= {name: value for name, value in QUICK.items()
                  if _defaulted(ctx, {"requests_per_level": "requests"}.get(name, name))}
    settings = DecideSettings(
        skip_eval=skip_eval, timeout_s=timeout, quick=quick,
        margin_percent=_D.margin_percent if margin is None else margin,
        **given, **{name: value for name, value in workload(dict(
            input_words=input_words, output_tokens=output_tokens, api=api,
            dataset_name=dataset_name, dataset_path=dataset_path, tokenizer=tokenizer, seed=seed,
            gsp_groups=gsp_groups, gsp_prompts_per_group=gsp_prompts_per_group,
            gsp_prefix_len=gsp_prefix_len, multi_turn=multi_turn, trace_scale=trace_scale,
            random_range_ratio=random_range_ratio, isl_osl=isl_osl,
            extra_request_body=extra_request_body)).items() if name not in given})
    request = decide_app.DecideRequest(variants=parse_variants(variants),
                                       out_dir=Path(out) if out else default_decide_dir(),
                                       settings=settings, chart=view.write_chart)
    loaded = load_profile(profile)
    # Bad usage, and a workload the sweeps could not send, exit 2 before the engine is asked.
    check_sweep(decide_app.chosen(loaded, request.variants)[0], settings.sweep())
    root = Root(image)
    result = decide_app.decide(
        loaded, request, launch=root.launch(), traffic=root.traffic(),
        progress=lambda shown: deploy_view.up_progress(console, shown),
        on_step=view.decide_step(console), on_progress=view.decide_progress(err_console),
    )
    view.show_decide(console, result)
    if result.error is not None:
        raise result.error


def _defaulted(ctx: typer.Context, param: str) -> bool:
    """Whether the option `param` took its default (was not on the command line)."""
    source = ctx.get_parameter_source(param)
    return source is None or source.name == "DEFAULT"


def _rescore(directory: Path, profile: str | None, goodput: list[str],
             margin: float | None) -> None:
    from opsctl.config.profiles import load_profile
    from opsctl.decide import app as decide_app
    from opsctl.decide import view
    from opsctl.decide.report import load_report
    from opsctl.traffic.bench.sweep import parse_goodput

    slo = parse_goodput(goodput)
    if slo is None:
        slo = load_profile(profile or load_report(directory).profile).slo
    result = decide_app.rescore(directory, slo, margin, chart=view.write_chart)
    view.show_decide(console, result)
    if result.error is not None:
        raise result.error

