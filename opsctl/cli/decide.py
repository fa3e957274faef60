"""The decide command: every variant through the gates and a sweep, and which one to run.

Typer declarations; the collaborators (the launch, the gate's smoke, the bench sweep) come from
the composition root (cli/root.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, app, console, err_console, image_ref, within
from opsctl.config.profile_checks import MAX_READINESS_SECONDS
from opsctl.decide.settings import DECIDE_DEFAULTS as _D


@app.command()
def decide(
    profile: ProfileOpt = None,
    variants: Annotated[str | None, typer.Option("--variants", help="Comma-separated variants, "
                        "run in this order (default: every variant of the profile).")] = None,
    concurrency: Annotated[str | None, typer.Option("--concurrency", help="Comma-separated "
                           f"bench levels (default {','.join(map(str, _D.concurrency))}).")
                           ] = None,
    requests: Annotated[int | None, typer.Option("--requests", min=1, max=1_000_000,
                        help="Measured requests per level (default max(16, 4 x "
                        "concurrency)).")] = _D.requests_per_level,
    out: Annotated[str | None, typer.Option("--out", help="Run directory (default "
                   "out/decide-<UTC time>/): decide.json, decide.md and one folder of evidence "
                   "per variant.")] = None,
    skip_eval: Annotated[bool, typer.Option("--skip-eval", help="Smoke without GSM8K and the "
                         "long-context probes: the gates are then start, verify and smoke's "
                         "own checks only.")] = _D.skip_eval,
    timeout: Annotated[float | None, typer.Option(
        help="Readiness timeout per variant in seconds (default: the profile's).",
        callback=within(0.01, MAX_READINESS_SECONDS))] = _D.timeout_s,
    image: Annotated[str | None, typer.Option(help="Run every variant on this image instead of "
                     "the ones `opsctl build` made (for variants that share one image).",
                     callback=image_ref)] = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, max=20, help="Sweeps per variant, "
                       "interleaved A B A B ... (each a fresh up -> bench -> down; the gates "
                       "run in the first).")] = _D.repeats,
    margin: Annotated[float | None, typer.Option("--margin", min=0.0, max=50.0, help="Percent: "
                      "throughputs closer than this (or whose ratio's 95% interval holds 1) "
                      f"are a tie (default {_D.margin_percent:g}; with --rescore, the run's "
                      "own).")] = None,
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

    Exit 0 a recommendation (or a tie), 2 bad usage, 4 (6 without Docker) no variant could start, 5 no
    variant qualified, 130 interrupted (the server removed, a partial report written).
    """
    from pathlib import Path

    from opsctl.cli.root import Root
    from opsctl.config.profiles import load_profile
    from opsctl.core.files import check_output_path
    from opsctl.core.reports import REPORTS_DIR, default_decide_dir
    from opsctl.decide import app as decide_app
    from opsctl.decide import view
    from opsctl.decide.settings import DecideSettings
    from opsctl.deploy import view as deploy_view
    from opsctl.traffic.bench.sweep import parse_concurrency, parse_variants

    if rescore is not None:
        _rescore(Path(rescore), profile, goodput or [], None if margin is None else margin / 100.0)
        return
    check_output_path(Path(out) if out else REPORTS_DIR, "--out", directory=True)
    settings = DecideSettings(
        concurrency=parse_concurrency(concurrency) if concurrency else _D.concurrency,
        requests_per_level=requests, skip_eval=skip_eval, timeout_s=timeout, repeats=repeats,
        margin_percent=_D.margin_percent if margin is None else margin)
    request = decide_app.DecideRequest(variants=parse_variants(variants),
                                       out_dir=Path(out) if out else default_decide_dir(),
                                       settings=settings, chart=view.write_chart)
    loaded = load_profile(profile)
    decide_app.chosen(loaded, request.variants)  # bad usage exits 2 before the engine is asked
    root = Root(image)
    result = decide_app.decide(
        loaded, request, launch=root.launch(), smoke=root.smoke(profile, None),
        bench=root.sweep(profile), progress=lambda shown: deploy_view.up_progress(console, shown),
        on_step=view.decide_step(console), on_progress=view.decide_progress(err_console),
    )
    view.show_decide(console, result)
    if result.error is not None:
        raise result.error


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

