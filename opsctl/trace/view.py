"""What `trace analyze` and `trace capture` show: the verdict, rich tables, the bar chart.

Styles are rich `Text` styles (the CLI's consoles print markup literally: kernel names are full
of brackets).

matplotlib is imported only when the chart is written; without it the analysis is still written
and the result says how to get the chart.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opsctl.core.plotting import PLOT_EXTRA, drawing, load_matplotlib
from opsctl.trace.analyze import Analysis, Row
from opsctl.trace.app import AnalyzeResult, CaptureResult
from opsctl.trace.report import Comparison

CHART = "kernels.png"
NO_MATPLOTLIB = (f"no chart: matplotlib is not installed (`{PLOT_EXTRA}`); the JSON and markdown "
                 "are written")
_SEVERITY = {"bottleneck": "bold red", "notable": "yellow", "info": "cyan"}
CHART_TOP = 10


@drawing
def write_chart(analyses: list[Analysis], comparison: Comparison | None, out_dir: Path
                ) -> tuple[list[Path], str | None]:
    """Horizontal bars: the top kernels' ms per step (both sides when comparing)."""
    matplotlib = load_matplotlib()
    if matplotlib is None:
        return [], NO_MATPLOTLIB
    plt = matplotlib.pyplot

    first = analyses[0]
    if comparison is not None:
        names = [m.name for m in comparison.kernels][:CHART_TOP]
        base = {m.name: m.base_ms for m in comparison.kernels}
        other = {m.name: m.other_ms for m in comparison.kernels}
        series = [(Path(comparison.base).name, [base[n] for n in names]),
                  (Path(comparison.other).name, [other[n] for n in names])]
    else:
        rows = first.kernels[:CHART_TOP]
        names = [r.name for r in rows]
        series = [(Path(first.file).name, [r.ms for r in rows])]
    fig, ax = plt.subplots(figsize=(9.0, 0.45 * max(len(names), 3) + 1.5), dpi=100)
    height = 0.8 / len(series)
    for index, (label, values) in enumerate(series):
        ax.barh([i + index * height for i in range(len(names))], values, height=height,
                label=label)
    ax.set_yticks([i + height * (len(series) - 1) / 2 for i in range(len(names))],
                  [n[:48] for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("GPU ms per decode step")
    ax.set_title("top GPU kernels per decode step")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = out_dir / CHART
    fig.savefig(path)
    plt.close(fig)
    return [path], None


def _table(title: str, rows: list[Row], top: int = 8) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("name", "kind", "per step", "ms/step", "share"):
        table.add_column(column, justify="left" if column in ("name", "kind") else "right")
    for row in rows[:top]:
        table.add_row(row.name[:70], row.kind or "-", f"{row.count:g}", f"{row.ms:.3f}",
                      f"{row.share:.1%}")
    return table


def _verdicts(console: Console, analysis: Analysis) -> None:
    if not analysis.findings:
        console.print("  no known signature: the time is spread over the kernels below")
    for finding in analysis.findings:
        console.print(Text.assemble("  ", (finding.severity, _SEVERITY[finding.severity]), " ",
                                    finding.verdict))


def show_analysis(result: AnalyzeResult, console: Console) -> None:
    first, *rest = result.analyses
    console.print(Text.assemble(
        (Path(first.file).name, "bold"),
        f": {first.steps} steps ({first.step_rule}), step {first.step_ms:.3f} ms, GPU busy "
        f"{first.gpu_busy_ms:.3f} ms, idle {first.idle_share:.0%}"
        + (f", device {first.device}" if first.device else "")))
    _verdicts(console, first)
    console.print(_table("GPU time by kind", first.kinds))
    console.print(_table("top GPU kernels", first.kernels))
    if first.cpu_ops:
        console.print(_table("top CPU ops (inclusive)", first.cpu_ops, top=5))
    for other in rest:
        names = ", ".join(f.signature for f in other.findings) or "no known signature"
        console.print(f"{Path(other.file).name}: step {other.step_ms:.3f} ms: {names}")
    if result.comparison is not None:
        show_comparison(result.comparison, console)
    if result.plot_note:
        console.print(Text(result.plot_note, style="yellow"))
    console.print(f"written: {', '.join(str(p) for p in result.written)}")


def show_comparison(c: Comparison, console: Console) -> None:
    console.print(Text.assemble(
        ("what moved", "bold"), f": step {c.base_step_ms:.3f} -> {c.other_step_ms:.3f} ms; "
        f"gone: {', '.join(c.gone) or 'none'}; new: {', '.join(c.new) or 'none'}"))
    table = Table(title="largest moves (ms per step)", title_justify="left")
    for column in ("kernel", "kind", "base", "other", "delta"):
        table.add_column(column, justify="left" if column in ("kernel", "kind") else "right")
    for m in c.kernels:
        table.add_row(m.name[:70], m.kind, f"{m.base_ms:.3f}", f"{m.other_ms:.3f}",
                      f"{m.delta_ms:+.3f}")
    console.print(table)


def show_capture(result: CaptureResult, console: Console) -> None:
    load = result.load
    console.print(Text.assemble(
        f"captured {len(result.traces)} trace file(s) from {result.plan.source.describe()}"
        + (" (stopped with /stop_profile)" if result.stopped_by_us else "")
        + f"; load: concurrency {load.concurrency}, {load.completed} requests done, "
        f"{load.in_flight} in flight, {load.failed} failed"
        + (f", TPOT p50 {load.tpot_p50_ms:.1f} ms" if load.tpot_p50_ms else ""),
        (f" ({load.error})" if load.error else "", "red")))
    show_analysis(result.analysis, console)
