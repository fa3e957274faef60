"""What smoke and bench show: rich tables, live progress, and bench's PNG plots.

The logic modules return reports; everything a person looks at is drawn here. matplotlib is
imported only when plots are written, so nothing else in the room needs it installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from opsctl.core.plotting import PLOT_EXTRA, drawing, load_matplotlib
from opsctl.traffic.app import BenchResult, Pushed, SmokeResult
from opsctl.traffic.bench.markdown import (
    SERVER_HEADER,
    SERVER_NOTE,
    fmt,
    server_cells,
    server_problems,
    sweep_end_line,
)
from opsctl.traffic.bench.plan import Progress
from opsctl.traffic.bench.report import BenchReport, VariantResult
from opsctl.traffic.evals.probes import ProbeResult
from opsctl.traffic.smoke_report import SmokeReport

_STATUS_COLOUR = {"pass": "green", "fail": "bold red", "skip": "yellow"}

def _line(console: Console, *parts: str | tuple[str, str]) -> None:
    """One line, printed as written: server and profile text is never parsed as markup, and a
    (text, style) part is styled."""
    console.print(Text.assemble(*parts), highlight=False, soft_wrap=True)


def _warning(console: Console, text: str) -> None:
    _line(console, ("warning:", "yellow"), f" {text}")


def show_pushed(pushed: Pushed, console: Console) -> None:
    """A push failure is a warning: it never changes the verdict."""
    if pushed.error is None:
        _line(console, f"pushed {pushed.kind} metrics to {pushed.gateway}")
    else:
        _warning(console, f"push to {pushed.gateway} failed: {pushed.error}")


# --- smoke ------------------------------------------------------------------------------------


def show_smoke(result: SmokeResult, console: Console) -> None:
    """The checks table, where the report went, and the push outcome."""
    render_smoke(result.report, console)
    _line(console, f"report: {result.path}")
    if result.pushed is not None:
        show_pushed(result.pushed, console)


def render_smoke(report: SmokeReport, console: Console) -> None:
    """Print the model/tokenizer provenance and the table of checks."""
    where = [f"profile {report.profile}"] if report.profile else []
    where += [f"variant {report.variant}"] if report.variant else []
    target = report.base_url + (f" ({', '.join(where)})" if where else "")
    console.print(f"smoke: {target}; server kind {report.server_kind}; "
                  f"API key {report.api_key or 'none'}", highlight=False, markup=False)
    if report.model:
        model = report.model
        console.print(f"model: {model.served_name!r} ({model.served_name_source}); "
                      f"tokenizer: {model.tokenizer_path!r} ({model.tokenizer_source})",
                      highlight=False, markup=False)
    table = Table(show_lines=False)
    for column in ("check", "status", "time", "detail"):
        table.add_column(column)
    for check in report.checks:
        table.add_row(Text(check.name), Text(check.status, style=_STATUS_COLOUR[check.status]),
                      f"{check.duration_s:.3f}s", Text(check.detail))
    console.print(table)
    render_accuracy(report, console)
    for warning in report.warnings:
        _warning(console, warning)
    verdict = ("PASS", "green") if report.passed else ("FAIL", "bold red")
    _line(console, "smoke ", verdict, f" in {report.duration_s:.1f}s")


def render_accuracy(report: SmokeReport, console: Console) -> None:
    """Where outputs first diverge, GSM8K accuracy with its 95% CI, and the probes table."""
    if report.divergence is not None:
        _line(console, f"first divergence from {report.compared_with or 'the reference'}"
                       f": {report.divergence.describe()} (reference vs this run)")
    if report.gsm8k is not None:
        result, score = report.gsm8k, report.gsm8k.score
        colour = "green" if score.passed else "bold red"
        extra = "".join(f", {count} {what}" for count, what in (
            (score.invalid, "without a number"), (score.errors, "failed")) if count)
        _line(console, "GSM8K: ", (f"accuracy {score.accuracy:.3f}", colour),
              f" ({score.correct}/{score.total}{extra}), 95% CI {score.ci95_low:.3f}-"
              f"{score.ci95_high:.3f}, threshold {score.threshold:g}; "
              f"{result.num_shots}-shot, {result.dataset} (sha256 {result.dataset_sha256[:12]}...)"
              f"; scored: {result.scored}")
    if report.gsm8k_divergence is not None:
        _line(console, "GSM8K outputs vs the reference's (no verdict): "
                       + report.gsm8k_divergence.describe())
    if report.long_context:
        console.print(_probes_table(report.long_context))


def _probes_table(probes: list[ProbeResult]) -> Table:
    table = Table(title="long-context probes")
    for column in ("probe", "status", "tokens", "depth", "expected", "got", "time"):
        table.add_column(column, justify="right" if column in ("tokens", "depth", "time")
                         else "left")
    for probe in probes:
        status = "pass" if probe.passed else "fail"
        server = f" / {probe.prompt_tokens}" if probe.prompt_tokens is not None else ""
        table.add_row(Text(probe.name), Text(status, style=_STATUS_COLOUR[status]),
                      f"~{probe.prompt_tokens_approx}{server}", f"{probe.depth:g}",
                      Text(_short(probe.expected)), Text(probe.error or _short(probe.got)),
                      f"{probe.duration_s:.2f}s")
    return table


def _short(text: str | None, width: int = 24) -> str:
    if text is None:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 3] + "..."


# --- bench ------------------------------------------------------------------------------------


def eval_progress(console: Console) -> Callable[[str], None]:
    """Prints smoke's eval progress lines (GSM8K answered, long-context probes done) as they
    come; the CLI gives it a stderr console."""
    return lambda line: _line(console, f"smoke: {line}")


def show_bench(result: BenchResult, console: Console) -> None:
    """The summary table, the files written, and the push outcome."""
    render_bench(result.report, console)
    _line(console, "wrote: " + ", ".join(str(p) for p in result.written))
    if not any(path.suffix == ".png" for path in result.written):
        _line(console, PLOTS_HINT)
    if result.pushed is not None:
        show_pushed(result.pushed, console)


def render_bench(report: BenchReport, console: Console) -> None:
    table = Table(title="opsctl bench")
    for column in ("variant", "conc", "ok/req", "failed", "TTFT p50", "ITL p50", "TPOT p50",
                   "TPOT p99", "out tok/s", "req/s", "good/s"):
        table.add_column(column, justify="right" if column != "variant" else "left")
    for run in report.variants:
        if run.error:
            table.add_row(Text(run.variant), "-", "-", "-", "", "", "", "", "", "",
                          Text(run.error))
            continue
        for lv in run.levels:
            table.add_row(
                Text(run.variant), str(lv.concurrency), f"{lv.completed}/{lv.requests}",
                str(lv.failed + lv.warmup_failed), fmt(lv.ttft_ms.p50, "{:.1f}"),
                fmt(lv.itl_ms.p50, "{:.2f}"), fmt(lv.tpot_ms.p50, "{:.2f}"),
                fmt(lv.tpot_ms.p99, "{:.2f}"), f"{lv.output_tokens_per_s:.1f}",
                f"{lv.requests_per_s:.3f}",
                fmt(lv.goodput.rate_per_s if lv.goodput else None, "{:.3f}"),
            )
    console.print(table)
    for run in report.variants:
        for lv in run.levels:
            if lv.sweep_end:
                _line(console, sweep_end_line(run.variant, lv)[2:])
    render_server(report, console)


def render_server(report: BenchReport, console: Console) -> None:
    """The client's ITL/TTFT beside the server's own, per level (only when it was sampled)."""
    runs = [run for run in report.variants if run.error is None]
    if not any(lv.server for run in runs for lv in run.levels):
        return
    table = Table(title="client vs server")
    for column in ("variant", *SERVER_HEADER):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for run in runs:
        for lv in run.levels:
            table.add_row(Text(run.variant), *(Text(cell) for cell in server_cells(lv)))
    console.print(table)
    _line(console, SERVER_NOTE)
    for run in runs:
        for problem in server_problems(run):
            _warning(console, problem)


@contextmanager
def live_progress(console: Console) -> Iterator[Progress]:
    """A rich progress bar per (variant, concurrency) level, updated on every finished request
    (a total of 0: a timed level, whose count is open)."""
    tasks: dict[tuple[str, int], TaskID] = {}
    with RichProgress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        # Redrawing costs the client CPU it measures: twice a second on a
        # terminal, and not at all when nobody watches (a pipe, a log file).
        auto_refresh=console.is_terminal,
        refresh_per_second=2,
    ) as bar:

        def update(label: str, concurrency: int, done: int, total: int) -> None:
            key = (label, concurrency)
            if key not in tasks:
                tasks[key] = bar.add_task(f"{label} c={concurrency}", total=total or None)
            bar.update(tasks[key], completed=done)

        yield update


PLOTS_HINT = f"plots skipped: matplotlib is not installed ({PLOT_EXTRA})"

# (file name, what it shows, the Pcts field, the SLO limit's config field)
_LATENCY_PLOTS = (
    ("tpot.png", "TPOT", "tpot_ms", "slo_tpot_ms"),
    ("ttft.png", "TTFT", "ttft_ms", "slo_ttft_ms"),
)
SLO_COLOUR = "#c0392b"


def gpu_count(server_info: dict[str, Any] | None) -> int | None:
    """GPUs one server spans, from its /server_info: tp_size x pp_size, times dp_size unless
    DP attention runs its DP ranks inside the TP group (sglang's data-parallel controller starts
    dp_size x tp_size workers otherwise). None when the server did not say."""
    info = server_info or {}
    tp, pp, dp = (info.get(key, 1) for key in ("tp_size", "pp_size", "dp_size"))
    if not all(isinstance(n, int) and n >= 1 for n in (tp, pp, dp)) or "tp_size" not in info:
        return None
    return int(tp * pp * (1 if info.get("enable_dp_attention") else dp))


def _gpus(runs: list[VariantResult]) -> tuple[int | None, str]:
    """(GPUs per server, in words for a title): the count from /server_info, the kind from
    nvidia-smi where the server ran on this host."""
    counts = {gpu_count(run.server_info) for run in runs}
    count = counts.pop() if len(counts) == 1 else None
    names = sorted({gpu.name for run in runs for lv in run.levels if lv.server
                    for gpu in lv.server.gpus if gpu.name})
    kind = " / ".join(names) if names else "kind not sampled"
    if count is None:
        return None, f"GPUs: {'differ' if len(counts) > 1 else 'not reported'} ({kind})"
    return count, f"{count} GPU{'s' if count != 1 else ''} ({kind})"


def chart_context(report: BenchReport, runs: list[VariantResult]) -> str:
    """What a bench chart is of, for its title: model, GPUs, ISL/OSL, variants and date."""
    config = report.config
    models = sorted({run.model.served_name for run in runs if run.model})
    if config.dataset_name == "words":
        lengths = (f"ISL ~{config.settings.input_words} words / "
                   f"OSL {config.settings.output_tokens} tokens")
    elif config.random_input_len is not None:
        lengths = f"ISL/OSL {config.random_input_len}/{config.random_output_len} tokens"
    else:
        lengths = f"ISL/OSL from dataset {config.dataset_name}"
    when = report.started_at[:16].replace("T", " ") + " UTC"
    where = f"profile {report.profile}, " if report.profile else ""
    return (f"{', '.join(models) or 'model unknown'} on {_gpus(runs)[1]}; {lengths}\n"
            f"{where}{', '.join(run.variant for run in runs)}; {when}")


def _runs(report: BenchReport) -> list[VariantResult]:
    return [run for run in report.variants if run.error is None and run.levels]


def _style(ax: Any, title: str, context: str, xlabel: str, ylabel: str,
           limit: float | None = None) -> None:
    """Title and context above, both axes' labels, y from 0 with room above the highest line
    (the SLO's `limit` included), the legend outside so it hides no line."""
    ax.set_title(f"{title}\n{context}", fontsize=9, loc="left")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(ax.get_ylim()[1], limit or 0.0) * 1.06 or 1.0)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _concurrency_axis(ax: Any, levels: tuple[int, ...]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(level) for level in levels])
    ax.minorticks_off()


def latency_chart(plt: Any, report: BenchReport, spec: tuple[str, str, str, str]) -> Any:
    """One latency against concurrency: p50 per variant with its p90-p99 band, and the SLO's
    limit as a line when the run had one."""
    _, name, field, slo_field = spec
    fig, ax = plt.subplots(figsize=(8.4, 4.6), dpi=110)
    runs = _runs(report)
    for index, run in enumerate(runs):
        colour = plt.get_cmap("tab10")(index % 10)
        rows = [(lv.concurrency, getattr(lv, field)) for lv in run.levels
                if getattr(lv, field).p50 is not None]
        if not rows:
            continue
        xs = [c for c, _ in rows]
        ax.plot(xs, [p.p50 for _, p in rows], marker="o", color=colour, label=run.variant)
        banded = [(c, p) for c, p in rows if p.p90 is not None and p.p99 is not None]
        if banded:
            ax.fill_between([c for c, _ in banded], [p.p90 for _, p in banded],
                            [p.p99 for _, p in banded], color=colour, alpha=0.2, linewidth=0)
    limit = getattr(report.config, slo_field)
    if limit:
        ax.axhline(limit, color=SLO_COLOUR, linestyle="--", linewidth=1.2,
                   label=f"SLO {name} {limit:g} ms")
    _concurrency_axis(ax, report.config.settings.concurrency)
    _style(ax, f"{name} vs concurrency: p50 line, p90-p99 band", chart_context(report, runs),
           "concurrency", f"{name} (ms)", limit)
    fig.tight_layout()
    return fig


def throughput_chart(plt: Any, report: BenchReport) -> Any:
    fig, ax = plt.subplots(figsize=(8.4, 4.6), dpi=110)
    runs = _runs(report)
    for run in runs:
        xs = [lv.concurrency for lv in run.levels]
        ax.plot(xs, [lv.output_tokens_per_s for lv in run.levels], marker="o", label=run.variant)
    _concurrency_axis(ax, report.config.settings.concurrency)
    _style(ax, "Output tokens/s vs concurrency", chart_context(report, runs), "concurrency",
           "output tokens/s (whole server)")
    fig.tight_layout()
    return fig


def pareto_chart(plt: Any, report: BenchReport) -> Any:
    """Output tokens/s per GPU against tokens/s per user (1000 / TPOT p50 in ms), every level
    of every variant, each point labelled with its concurrency; the TPOT SLO as the least
    tokens/s per user it allows."""
    fig, ax = plt.subplots(figsize=(8.4, 5.0), dpi=110)
    runs = _runs(report)
    count, _ = _gpus(runs)
    curves = [(run.variant, [(1000.0 / lv.tpot_ms.p50, lv.output_tokens_per_s / (count or 1),
                              lv.concurrency) for lv in run.levels if lv.tpot_ms.p50])
              for run in runs]
    span = (max((x for _, pts in curves for x, _, _ in pts), default=1.0),
            max((y for _, pts in curves for _, y, _ in pts), default=1.0))
    for variant, points in curves:
        if not points:
            continue
        line = ax.plot([x for x, _, _ in points], [y for _, y, _ in points], marker="o",
                       label=variant)[0]
        label_levels(ax, points, span, line.get_color())
    slo_bound(ax, report.config.slo_tpot_ms, span[0])
    per = f"per GPU (/{count})" if count else "per server (GPU count not reported)"
    _style(ax, "Throughput vs interactivity (up and right is better)",
           chart_context(report, runs), "tokens/s per user (1000 / TPOT p50 ms)",
           f"output tokens/s {per}")
    fig.tight_layout()
    return fig


def slo_bound(ax: Any, limit: float | None, widest: float) -> None:
    """On a Pareto chart: the TPOT limit as the least tokens/s per user it allows, the side
    that misses it shaded; x from 0 with room for the widest point's label."""
    if limit:
        ax.axvspan(0, 1000.0 / limit, color=SLO_COLOUR, alpha=0.06, linewidth=0)
        ax.axvline(1000.0 / limit, color=SLO_COLOUR, linestyle="--", linewidth=1.2,
                   label=f"SLO TPOT {limit:g} ms: {1000.0 / limit:.1f} tok/s/user\n"
                         "(shaded: misses it)")
    ax.set_xlim(0, max(widest, 1000.0 / limit if limit else 0.0) * 1.1)


def label_levels(ax: Any, points: list[tuple[float, float, int]], span: tuple[float, float],
                 colour: Any) -> None:
    """`cN` beside each level's point; levels whose points sit on each other share one label
    (`c16, c64`), so no label hides another."""
    groups: list[tuple[float, float, list[int]]] = []
    for x, y, concurrency in points:
        if groups and abs(x - groups[-1][0]) < 0.04 * span[0] \
                and abs(y - groups[-1][1]) < 0.04 * span[1]:
            groups[-1][2].append(concurrency)
        else:
            groups.append((x, y, [concurrency]))
    for x, y, levels in groups:
        ax.annotate(", ".join(f"c{level}" for level in levels), (x, y),
                    textcoords="offset points", xytext=(5, 3), fontsize=7, color=colour)


@drawing
def write_plots(report: BenchReport, out_dir: Path) -> list[Path]:
    """tpot.png and ttft.png (p50 with the p90-p99 band and the SLO line), throughput.png and
    pareto.png (tokens/s per GPU against tokens/s per user), every variant in each.

    Plots are optional: without matplotlib nothing is drawn and [] comes back (`PLOTS_HINT`
    says how to get them); every other output of the run is written as usual.
    """
    matplotlib = load_matplotlib()
    if matplotlib is None:
        return []
    plt = matplotlib.pyplot
    figures = [(spec[0], latency_chart(plt, report, spec)) for spec in _LATENCY_PLOTS]
    figures += [("throughput.png", throughput_chart(plt, report)),
                ("pareto.png", pareto_chart(plt, report))]
    written: list[Path] = []
    for filename, fig in figures:
        path = out_dir / filename
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
