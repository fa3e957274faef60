"""bench.md: the sweep as a markdown table, each later variant with its delta vs the first.

Plain text, no rich: the file is read in a PR or an issue, where the first variant is the
baseline a change is judged against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opsctl.traffic.bench.report import BenchReport, LevelResult, VariantResult
    from opsctl.traffic.bench.server_sampler import LatencyFigure, ServerFigures

# (label, how to read it from a level, format)
_ROWS: tuple[tuple[str, Callable[[LevelResult], float | None], str], ...] = (
    ("TTFT p50 (ms)", lambda lv: lv.ttft_ms.p50, "{:.1f}"),
    ("TTFT p95 (ms)", lambda lv: lv.ttft_ms.p95, "{:.1f}"),
    ("ITL p50 (ms)", lambda lv: lv.itl_ms.p50, "{:.2f}"),
    ("TPOT p50 (ms)", lambda lv: lv.tpot_ms.p50, "{:.2f}"),
    ("TPOT p95 (ms)", lambda lv: lv.tpot_ms.p95, "{:.2f}"),
    ("TPOT p99 (ms)", lambda lv: lv.tpot_ms.p99, "{:.2f}"),
    ("input tok/s", lambda lv: lv.input_tokens_per_s, "{:.1f}"),
    ("output tok/s", lambda lv: lv.output_tokens_per_s, "{:.1f}"),
    ("requests/s", lambda lv: lv.requests_per_s, "{:.3f}"),
    ("goodput (req/s)", lambda lv: lv.goodput.rate_per_s if lv.goodput else None, "{:.3f}"),
    ("within SLO (%)", lambda lv: _share(lv), "{:.1f}"),
    ("failed", lambda lv: float(lv.failed + lv.warmup_failed), "{:.0f}"),
)


# Client vs server, one row per level: (header, client figure, server histogram field, stat).
_SIDE_BY_SIDE: tuple[tuple[str, Callable[[LevelResult], float | None], str, str], ...] = (
    ("ITL mean", lambda lv: lv.itl_ms.mean, "itl_ms", "mean"),
    ("ITL p50", lambda lv: lv.itl_ms.p50, "itl_ms", "p50"),
    ("ITL p99", lambda lv: lv.itl_ms.p99, "itl_ms", "p99"),
    ("TTFT mean", lambda lv: lv.ttft_ms.mean, "ttft_ms", "mean"),
    ("TTFT p50", lambda lv: lv.ttft_ms.p50, "ttft_ms", "p50"),
)
SERVER_HEADER = (
    "conc",
    *(f"{h} client / server (ms)" for h, *_ in _SIDE_BY_SIDE),
    "running mean/max",
    "queued mean/max",
    "KV max",
    "accept len mean",
    "GPU util mean",
    "GPU mem max (MiB)",
)
SERVER_NOTE = ("Server columns: the server's own /metrics during the measured phase (histograms "
               "end minus start; gauges sampled periodically); `~` marks a percentile estimated "
               "from histogram buckets, `>=` one beyond the top bucket. Accept len: tokens per "
               "speculative verify step (sglang:spec_accept_length; `-` without speculation). "
               "GPU: this host's "
               "nvidia-smi, utilisation averaged over GPUs and samples, the highest memory used.")


def _server_value(server: LatencyFigure | None, stat: str) -> str:
    value = getattr(server, stat) if server else None
    if value is None or server is None:
        return "n/a"
    mark = ">=" if stat in server.lower_bounds else "" if stat == "mean" else "~"
    return f"{mark}{value:.2f}"


def server_cells(level: LevelResult) -> list[str]:
    """The SERVER_HEADER cells of one level; one explaining cell when nothing was sampled."""
    server = level.server
    if server is None or server.unavailable:
        why = server.unavailable if server else "not sampled"
        return [str(level.concurrency), f"server figures: unavailable ({why})"]
    cells = [str(level.concurrency)]
    for _, read, field, stat in _SIDE_BY_SIDE:
        cells.append(
            f"{fmt(read(level), '{:.2f}')} / {_server_value(getattr(server, field), stat)}"
        )
    for gauge in (server.running, server.queued):
        cells.append(f"{gauge.mean:.1f}/{gauge.max:g}" if gauge else "n/a")
    cells.append(f"{server.kv_usage.max * 100:.1f}%" if server.kv_usage else "n/a")
    accept = server.spec_accept_length
    cells.append(f"{accept.mean:.2f}" if accept else "-")
    return cells + _gpu_cells(server)


def _gpu_cells(server: ServerFigures) -> list[str]:
    """GPU utilisation averaged over the GPUs, and the highest memory used."""
    utils = [g.util_mean_pct for g in server.gpus if g.util_mean_pct is not None]
    mems = [g.mem_used_max_mib for g in server.gpus if g.mem_used_max_mib is not None]
    util = f"n/a ({server.gpu_unavailable or 'no reading'})"
    if utils:
        util = f"{sum(utils) / len(utils):.0f}% ({len(utils)} GPU)"
    return [util, f"{max(mems):.0f}" if mems else "n/a"]


def server_problems(run: VariantResult) -> list[str]:
    """Why a server figure of a sampled level is missing, one line each."""
    lines = []
    for level in run.levels:
        server = level.server
        if server is None or server.unavailable:
            continue
        for name in ("itl_ms", "ttft_ms", "tpot_ms", "e2e_ms"):
            figure = getattr(server, name)
            if figure is not None and figure.unavailable:
                lines.append(f"{run.variant} c={level.concurrency}: server "
                             f"{name[:-3].upper()}: {figure.unavailable}")
        if server.scrape_failures:
            lines.append(f"{run.variant} c={level.concurrency}: {server.scrape_failures} of "
                         f"{server.scrapes} /metrics scrapes failed ({server.last_failure})")
    return lines


def _server_section(report: BenchReport) -> list[str]:
    runs = [v for v in report.variants if v.error is None]
    if not any(level.server for run in runs for level in run.levels):
        return []
    lines = ["", "Client vs server:", "", "| variant | " + " | ".join(SERVER_HEADER) + " |",
             "|" + "---|" * (len(SERVER_HEADER) + 1)]
    for run in runs:
        lines += [f"| {run.variant} | " + " | ".join(server_cells(lv)) + " |" for lv in run.levels]
    lines += ["", SERVER_NOTE]
    lines += [f"- {problem}" for run in runs for problem in server_problems(run)]
    return lines


def _share(level: LevelResult) -> float | None:
    good = level.goodput
    return None if good is None or good.share is None else good.share * 100


def delta_percent(value: float | None, base: float | None) -> str:
    if value is None or base is None or base == 0:
        return ""
    return f" ({(value - base) / base * 100:+.1f}%)"


def fmt(value: float | None, spec: str) -> str:
    """`spec`-formatted, or "n/a" when nothing was measured."""
    return "n/a" if value is None else spec.format(value)


def sweep_end_line(variant: str, level: LevelResult) -> str:
    return f"- {variant}: the sweep ended after concurrency {level.concurrency}: {level.sweep_end}"


def markdown_table(report: BenchReport) -> str:
    """One row per (concurrency, metric); each variant after the first shows its delta."""
    runs = [v for v in report.variants if v.error is None]
    if not runs:
        return "No variant produced results.\n"
    base = runs[0]
    header = ["concurrency", "metric", base.variant] + [
        f"{v.variant} (Δ vs {base.variant})" for v in runs[1:]
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for concurrency in report.config.settings.concurrency:
        lines += _level_lines(concurrency, runs)
    notes = ["", _config_line(report)]
    if report.config.workload_note:
        notes.append(f"Workload: {report.config.workload_note}.")
    for run in report.variants:
        notes += _variant_notes(run)
    return "\n".join(lines + notes + _server_section(report)) + "\n"


def _at(run: VariantResult, concurrency: int) -> LevelResult | None:
    return next((lv for lv in run.levels if lv.concurrency == concurrency), None)


def _level_lines(concurrency: int, runs: list[VariantResult]) -> list[str]:
    """One concurrency's rows: each metric for the first variant, then the others with their
    delta against it (none for failures)."""
    base_level = _at(runs[0], concurrency)
    lines = []
    for label, read, spec in _ROWS:
        base_value = read(base_level) if base_level else None
        cells = [str(concurrency), label, fmt(base_value, spec)]
        for other in runs[1:]:
            level = _at(other, concurrency)
            value = read(level) if level else None
            delta = "" if label == "failed" else delta_percent(value, base_value)
            cells.append(fmt(value, spec) + delta)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _config_line(report: BenchReport) -> str:
    """How the sweep loaded the server, and what goodput counts."""
    config, asked = report.config, report.config.settings
    workload = f"dataset `{config.dataset_name}`"
    if config.dataset_name == "words":
        workload = (f"{asked.input_words}-word prompts (about one token per word), "
                    f"{asked.output_tokens} output tokens")
    slo = ", ".join(f"{name} <= {ms:g} ms" for name, ms in
                    (("TTFT", config.slo_ttft_ms), ("TPOT", config.slo_tpot_ms)) if ms)
    counted = f"; goodput counts requests with {slo}." if slo else "; no SLO: no goodput."
    return (f"{config.arrival[:1].upper()}{config.arrival[1:]}, {workload}, temperature "
            f"{config.temperature:g}, `{asked.api}` API; warm-up excluded; percentiles by linear "
            "interpolation. Negative Δ is better for latencies, positive for throughput"
            + counted)


def _variant_notes(run: VariantResult) -> list[str]:
    """A variant's notes: why it was not benchmarked or what served it; records and sweep ends."""
    notes = []
    if run.error:
        notes.append(f"- {run.variant}: not benchmarked: {run.error}")
    elif run.model:
        notes.append(f"- {run.variant}: {run.base_url}, model {run.model.served_name!r} "
                     f"({run.model.served_name_source})")
    notes += [f"- {run.variant} at concurrency {lv.concurrency}: per-request records "
              f"{lv.requests_note}" for lv in run.levels if lv.requests_note]
    notes += [sweep_end_line(run.variant, lv) for lv in run.levels if lv.sweep_end]
    return notes
