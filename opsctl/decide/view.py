"""How `opsctl decide` looks in a terminal: each step as it happens, then one row per variant,
the pairwise comparisons and the recommendation. decide.md (opsctl.decide.report) is the full
record; this is its summary. The only module of opsctl/decide/ that knows about rich.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opsctl.core.text import printable
from opsctl.decide.app import DecideResult
from opsctl.decide.report import VariantRecord
from opsctl.traffic.bench.markdown import fmt

_STATUS_STYLE = {"qualified": "green", "disqualified": "bold red", "interrupted": "yellow",
                 "not run": "yellow"}
_PAIR_STYLE = {"agree": "green", "disagree": "bold yellow", "not compared": "dim"}


def decide_step(console: Console) -> Callable[[str], None]:
    """Prints each step of the run as it happens."""
    return lambda line: console.print(
        Text.assemble(("decide:", "bold"), " ", printable(line)), highlight=False, soft_wrap=True)


def decide_progress(console: Console) -> Callable[[str], None]:
    """Prints decide's overall progress lines (the CLI gives it a stderr console)."""
    return lambda line: console.print(
        Text.assemble(("decide progress:", "dim"), " ", printable(line)), highlight=False,
        soft_wrap=True)


def _ci(value: float | None, interval: tuple[float, float] | None, form: str) -> str:
    shown = fmt(value, form)
    if interval is None or value is None:
        return shown
    return f"{shown} [{form.format(interval[0])}-{form.format(interval[1])}]"


def _best(record: VariantRecord) -> tuple[str, str, str]:
    best = record.best_level()
    if best is None:
        return "-", "-", "-"
    return (str(best.concurrency), _ci(best.tpot_p50_ms, best.tpot_p50_ci_ms, "{:.2f}"),
            _ci(best.output_tokens_per_s, best.output_tokens_per_s_ci, "{:.1f}"))


def show_decide(console: Console, result: DecideResult) -> None:
    report = result.report
    table = Table("variant", "status", "sglang", "verify", "GSM8K (95% CI)", "probes",
                  "best c (SLO)", "TPOT p50 ms [95% CI]", "output tok/s [95% CI]",
                  title=f"decide: {report.profile} ({report.repeats} repeat(s))")
    for record in report.variants:
        status = record.status if record.status != "disqualified" else \
            f"DISQUALIFIED ({record.failed_gate})"
        found = record.accuracy
        accuracy = (f"{found.accuracy:.3f} ({found.ci95_low:.3f}-{found.ci95_high:.3f})"
                    if found else "-")
        probes = f"{sum(p.passed for p in record.probes)}/{len(record.probes)}" \
            if record.probes else "-"
        table.add_row(Text(record.variant), Text(status, style=_STATUS_STYLE[record.status]),
                      record.release, Text(record.verify or "-"), accuracy, probes,
                      *_best(record))
    console.print(table)
    for record in report.variants:
        if record.status == "disqualified":
            console.print(Text.assemble((f"{record.variant}: ", "bold red"),
                                        printable(record.reason or ""),
                                        f" (evidence: {', '.join(record.evidence)})"),
                          highlight=False, soft_wrap=True)
    for pair in report.pairs:
        console.print(Text.assemble((f"{pair.a} vs {pair.b}: {pair.outcome}", _PAIR_STYLE[pair.outcome]),
                                    f": {pair.detail}"), highlight=False, soft_wrap=True)
    style = "bold green" if report.winner else ("bold yellow" if report.tie else "bold red")
    console.print(Text(report.recommendation, style=style), highlight=False, soft_wrap=True)
    console.print(Text(f"report: {', '.join(str(path) for path in result.written)} "
                       f"(per-variant evidence under {result.out_dir}/)"),
                  highlight=False, soft_wrap=True)
