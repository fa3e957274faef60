"""What `opsctl tune` shows: each point as it starts and ends, the table, and a bar chart of TPOT
per point (matplotlib imported only when the chart is written)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opsctl.core.plotting import PLOT_EXTRA, drawing, load_matplotlib
from opsctl.tune.app import TuneResult
from opsctl.tune.state import Measurement, TuneState

CHART = "tpot.png"
NO_MATPLOTLIB = f"no chart: matplotlib is not installed (`{PLOT_EXTRA}`); tune.md has the table"


def on_start(console: Console) -> Callable[[str, int, int], None]:
    def show(key: str, rung: int, requests: int) -> None:
        console.print(f"point {key} (rung {rung}, {requests} requests): up, bench, down ...")

    return show


def on_done(console: Console) -> Callable[[Measurement], None]:
    def show(m: Measurement) -> None:
        if m.status == "ok":
            console.print(Text.assemble("  ", ("ok", "green"),
                                        f" TPOT p50 {m.tpot_p50_ms:.1f} ms ({m.total_s:.0f} s)"))
            return
        console.print(Text.assemble("  ", ("failed", "red"), f" {m.reason}"))
        for line in m.log:
            console.print(f"    {line}", highlight=False)

    return show


@drawing
def write_chart(state: TuneState, out_dir: Path) -> tuple[list[Path], str | None]:
    ok = [m for m in state.measurements if m.status == "ok" and m.tpot_p50_ms is not None]
    if not ok:
        return [], None
    matplotlib = load_matplotlib()
    if matplotlib is None:
        return [], NO_MATPLOTLIB
    plt = matplotlib.pyplot

    ok.sort(key=lambda m: (m.rung, m.key))
    labels = [f"{m.key} (r{m.rung})" for m in ok]
    fig, ax = plt.subplots(figsize=(8.0, 0.45 * len(ok) + 1.5), dpi=100)
    ax.barh(range(len(ok)), [m.tpot_p50_ms or 0.0 for m in ok])
    ax.set_yticks(range(len(ok)), [label[:60] for label in labels])
    ax.invert_yaxis()
    ax.set_xlabel(f"TPOT p50 (ms) at concurrency {state.question.concurrency}")
    ax.set_title(f"opsctl tune: {state.question.profile} / {state.question.variant}")
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    path = out_dir / CHART
    fig.savefig(path)
    plt.close(fig)
    return [path], None


def show_result(result: TuneResult, console: Console) -> None:
    state = result.state
    table = Table(title=f"tune: {result.points} point(s), search {state.mode}",
                  title_justify="left")
    for column in ("point", "rung", "requests", "status", "TPOT p50", "tok/s", "reason"):
        table.add_column(column)
    for m in sorted(state.measurements, key=lambda m: (m.rung, m.key)):
        table.add_row(m.key, str(m.rung), str(m.requests), m.status,
                      "-" if m.tpot_p50_ms is None else f"{m.tpot_p50_ms:.1f}",
                      "-" if m.output_tokens_per_s is None else f"{m.output_tokens_per_s:.0f}",
                      (m.reason or "")[:80])
    console.print(table)
    if state.skipped:
        console.print(f"not measured (budget spent): {', '.join(state.skipped)}")
    if result.best is None:
        console.print(Text("no point was measured successfully: no overlay written", "red"))
    else:
        console.print(Text.assemble(("best", "bold green"), f": {result.best.key} (TPOT p50 "
                                    f"{result.best.tpot_p50_ms:.1f} ms)"))
    if result.plot_note:
        console.print(Text(result.plot_note, style="yellow"))
    console.print(f"written: {', '.join(str(p) for p in result.written)}")
