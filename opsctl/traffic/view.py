"""What smoke and bench show: rich tables, live progress, and bench's PNG plots.

The logic modules return reports; everything a person looks at is drawn here. matplotlib is
imported only when plots are written, so nothing else in the room needs it installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from opsctl.core.plotting import PLOT_EXTRA, load_matplotlib
from opsctl.traffic.app import BenchResult, Pushed, SmokeResult
from opsctl.traffic.bench.markdown import (
    SERVER_HEADER,
    SERVER_NOTE,
    fmt,
    server_cells,
    server_problems,
    sweep_end_line,
)
from opsctl.traffic.bench.report import BenchReport, LevelResult
from opsctl.traffic.bench.sweep import Progress
from opsctl.traffic.evals.probes import ProbeResult
from opsctl.traffic.smoke_report import SmokeReport

_STATUS_COLOUR = {"pass": "green", "fail": "bold red", "skip": "yellow"}

# (file name, y-axis label, how to read it from a level)
_PLOTS: tuple[tuple[str, str, Callable[[LevelResult], float | None]], ...] = (
    ("tpot.png", "TPOT p50 (ms)", lambda lv: lv.tpot_ms.p50),
    ("throughput.png", "output tokens/s", lambda lv: lv.output_tokens_per_s),
)


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
    if report.lm_eval is not None:
        run, score = report.lm_eval, report.lm_eval.score
        _line(console, f"lm-eval {run.task}: ", (f"accuracy {score.accuracy:.3f}",
                                                  "green" if score.passed else "bold red"),
              f" ({score.correct}/{score.total}), 95% CI {score.ci95_low:.3f}-"
              f"{score.ci95_high:.3f}, threshold {score.threshold:g}; lm-eval "
              f"{run.lm_eval_version} {run.model}, {run.num_shots}-shot, {run.dataset} "
              f"(sha256 {run.dataset_sha256[:12]}...)")
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
    with RichProgress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=False,
                      # Redrawing costs the client CPU it measures: twice a second on a
                      # terminal, and not at all when nobody watches (a pipe, a log file).
                      auto_refresh=console.is_terminal, refresh_per_second=2) as bar:

        def update(label: str, concurrency: int, done: int, total: int) -> None:
            key = (label, concurrency)
            if key not in tasks:
                tasks[key] = bar.add_task(f"{label} c={concurrency}", total=total or None)
            bar.update(tasks[key], completed=done)

        yield update


PLOTS_HINT = f"plots skipped: matplotlib is not installed ({PLOT_EXTRA})"


def write_plots(report: BenchReport, out_dir: Path) -> list[Path]:
    """TPOT p50 and output throughput against concurrency, one line per variant.

    Plots are optional: without matplotlib nothing is drawn and [] comes back (`PLOTS_HINT`
    says how to get them); every other output of the run is written as usual.
    """
    matplotlib = load_matplotlib()
    if matplotlib is None:
        return []
    plt = matplotlib.pyplot

    written: list[Path] = []
    for filename, ylabel, read in _PLOTS:
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
        for run in report.variants:
            points = [(lv.concurrency, read(lv)) for lv in run.levels if read(lv) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", label=run.variant)
        ax.set_xscale("log", base=2)
        levels = report.config.settings.concurrency
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.minorticks_off()
        ax.set_xlabel("concurrency")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel} vs concurrency")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        fig.tight_layout()
        path = out_dir / filename
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written
