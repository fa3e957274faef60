"""How `opsctl decide` looks: in a terminal each step as it happens, then one row per variant,
the pairwise comparisons and the recommendation; and the cross-variant chart decide.md embeds.
decide.md (opsctl.decide.report) is the full record; this is its summary. The only module of
opsctl/decide/ that knows about rich or matplotlib.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opsctl.core.errors import OpsctlError
from opsctl.core.plotting import drawing, load_matplotlib
from opsctl.core.text import printable
from opsctl.decide.app import DecideResult
from opsctl.decide.report import DecideReport, Level, VariantRecord
from opsctl.traffic.bench.markdown import fmt
from opsctl.traffic.bench.records import load_report
from opsctl.traffic.bench.report import BenchReport, VariantResult
from opsctl.traffic.view import SLO_COLOUR, chart_context, gpu_count, label_levels, slo_bound

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
        console.print(
            Text.assemble(
                (f"{pair.a} vs {pair.b}: {pair.outcome}", _PAIR_STYLE[pair.outcome]),
                f": {pair.detail}",
            ),
            highlight=False,
            soft_wrap=True,
        )
    style = "bold green" if report.winner else ("bold yellow" if report.tie else "bold red")
    console.print(Text(report.recommendation, style=style), highlight=False, soft_wrap=True)
    console.print(Text(f"report: {', '.join(str(path) for path in result.written)} "
                       f"(per-variant evidence under {result.out_dir}/)"),
                  highlight=False, soft_wrap=True)


# --- the chart decide.md embeds --------------------------------------------------------------


@drawing
def write_chart(report: DecideReport, out: Path, name: str) -> Path | None:
    """`name` in `out`: every swept variant's pooled levels side by side; None when no level
    was measured or matplotlib cannot be imported (decide.md then embeds nothing)."""
    if not any(record.levels for record in report.variants):
        return None
    matplotlib = load_matplotlib()
    if matplotlib is None:
        return None
    plt = matplotlib.pyplot
    fig = comparison_chart(plt, report, out)
    path = out / name
    fig.savefig(path)
    plt.close(fig)
    return path


def _bench_context(report: DecideReport, out: Path) -> tuple[str, int | None]:
    """The title's context (model, GPUs, ISL/OSL, variants, date) and the GPUs per server,
    from each variant's first bench report that reads back."""
    first: BenchReport | None = None
    runs: list[VariantResult] = []
    for record in report.variants:
        for run in record.runs:
            try:
                bench = load_report((out / run.bench_report).parent) if run.bench_report \
                    else None
            except OpsctlError:
                continue
            if bench is not None and bench.variants:
                first = first or bench
                runs.append(bench.variants[0])
                break
    if first is None:
        return f"profile {report.profile}; {report.started_at[:16].replace('T', ' ')} UTC", None
    dated = first.model_copy(update={"started_at": report.started_at, "profile": report.profile})
    counts = {gpu_count(run.server_info) for run in runs}
    return chart_context(dated, runs), counts.pop() if len(counts) == 1 else None


def _bars(value: float, interval: tuple[float, float] | None) -> tuple[float, float]:
    if interval is None:
        return 0.0, 0.0
    return max(0.0, value - interval[0]), max(0.0, interval[1] - value)


def _drawn(record: VariantRecord) -> list[Level]:
    return [lv for lv in record.levels if lv.tpot_p50_ms and lv.output_tokens_per_s is not None]


def _draw_variant(axes: Any, record: VariantRecord, colour: Any, per_gpu: int,
                  span: tuple[float, float]) -> None:
    levels = _drawn(record)
    if not levels:
        return
    label = record.variant + ("" if record.status == "qualified" else f" ({record.status})")
    xs = [lv.concurrency for lv in levels]
    tpot = [lv.tpot_p50_ms or 0.0 for lv in levels]
    rate = [lv.output_tokens_per_s or 0.0 for lv in levels]
    style = {"marker": "o", "color": colour, "capsize": 3, "linewidth": 1.5}
    axes[0].errorbar(xs, tpot, yerr=list(zip(*(_bars(v, lv.tpot_p50_ci_ms)
                                                for v, lv in zip(tpot, levels, strict=True)),
                                              strict=True)), label=label, **style)
    axes[1].errorbar(xs, rate, yerr=list(zip(*(_bars(v, lv.output_tokens_per_s_ci)
                                                for v, lv in zip(rate, levels, strict=True)),
                                              strict=True)), label=label, **style)
    points = [(1000.0 / t, r / per_gpu, level.concurrency)
              for level, t, r in zip(levels, tpot, rate, strict=True)]
    axes[2].plot([x for x, _, _ in points], [y for _, y, _ in points], marker="o",
                 color=colour, label=label)
    label_levels(axes[2], points, span, colour)
    best = record.best_level()
    if best is not None and best in levels:
        _ring(axes, best, per_gpu, colour)


def _ring(axes: Any, best: Level, per_gpu: int, colour: Any) -> None:
    ring = {"s": 220, "facecolors": "none", "edgecolors": colour, "linewidths": 1.8}
    tpot, rate = best.tpot_p50_ms or 0.0, best.output_tokens_per_s or 0.0
    axes[0].scatter([best.concurrency], [tpot], **ring)
    axes[1].scatter([best.concurrency], [rate], **ring)
    axes[2].scatter([1000.0 / tpot], [rate / per_gpu], **ring)


def _span(report: DecideReport, gpus: int) -> tuple[float, float]:
    """The largest tokens/s per user and output tokens/s per GPU any drawn level reaches."""
    drawn = [lv for record in report.variants for lv in _drawn(record)]
    return (max((1000.0 / (lv.tpot_p50_ms or 1.0) for lv in drawn), default=1.0),
            max(((lv.output_tokens_per_s or 0.0) / gpus for lv in drawn), default=1.0))


def _label_axes(axes: Any, levels: list[int], count: int | None, limit: float | None) -> None:
    """Concurrency on a log2 axis for the first two charts; titles, labels, limits, grids."""
    for ax in axes[:2]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.minorticks_off()
        ax.set_xlabel("concurrency")
    per = f"per GPU (/{count})" if count else "per server (GPU count not reported)"
    for ax, title, ylabel, top in (
            (axes[0], "TPOT p50 [95% CI]", "TPOT p50 (ms)", limit or 0.0),
            (axes[1], "Output tokens/s [95% CI]", "output tokens/s (whole server)", 0.0),
            (axes[2], "Throughput vs interactivity (up and right is better)",
             f"output tokens/s {per}", 0.0)):
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, max(ax.get_ylim()[1], top) * 1.06 or 1.0)
        ax.grid(True, alpha=0.3)
    axes[2].set_xlabel("tokens/s per user (1000 / TPOT p50 ms)")
    axes[2].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def comparison_chart(plt: Any, report: DecideReport, out: Path) -> Any:
    """TPOT p50 and output tokens/s against concurrency with their bootstrap 95% intervals, and
    output tokens/s per GPU against tokens/s per user: every variant, every pooled level; each
    variant's best level (the one the ranking reads) ringed; the SLO's TPOT limit dashed."""
    context, count = _bench_context(report, out)
    fig, axes = plt.subplots(1, 3, figsize=(17.0, 5.4), dpi=100)
    span = _span(report, count or 1)
    for index, record in enumerate(report.variants):
        _draw_variant(axes, record, plt.get_cmap("tab10")(index % 10), count or 1, span)
    limit = report.slo_tpot_ms
    if limit:
        axes[0].axhline(limit, color=SLO_COLOUR, linestyle="--", linewidth=1.2,
                        label=f"SLO TPOT {limit:g} ms")
    slo_bound(axes[2], limit, span[0])
    _label_axes(axes, report.concurrency, count, limit)
    verdict = report.winner or (f"tie: {', '.join(report.tie)}" if report.tie else "no winner")
    fig.suptitle(f"opsctl decide: {verdict} (ringed: each variant's best level under the SLO; "
                 f"{report.repeats} repeat(s) pooled)\n{context}", fontsize=10, x=0.01,
                 ha="left")
    fig.tight_layout()
    return fig
