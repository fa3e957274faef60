"""The trace room's commands: `trace analyze` and `trace capture`.

Each takes its collaborators (the plot writer from the view; for capture the HTTP client, where
the trace files appear, the load and a clock) and returns a result the view prints.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from opsctl.core.clock import Clock
from opsctl.core.errors import UsageError, stop_error, stop_reason
from opsctl.core.reports import REPORTS_DIR, stamp
from opsctl.trace import capture as cap
from opsctl.trace import chrome, report, signatures
from opsctl.trace.analyze import Analysis, analyze
from opsctl.trace.load import LoadSummary
from opsctl.trace.report import Comparison

TRACE_DIR_PREFIX = "trace-"
TRACES_SUBDIR = "traces"
# Writes the bar chart(s) into the directory: (paths written, a note when it could not).
PlotWriter = Callable[[list[Analysis], Comparison | None, Path], tuple[list[Path], str | None]]
# Holds a decode load at a concurrency against a base URL while the block runs.
LoadHolder = Callable[[str, int], AbstractContextManager[LoadSummary]]


def default_out_dir(now: dt.datetime | None = None) -> Path:
    return REPORTS_DIR / f"{TRACE_DIR_PREFIX}{stamp(now)}"


@dataclass(frozen=True)
class AnalyzeRequest:
    path: Path
    compare: Path | None = None
    out_dir: Path | None = None
    layers: int | None = None  # per-layer figures in the verdicts
    max_bytes: int = chrome.DEFAULT_MAX_BYTES
    header: dict[str, str] = field(default_factory=dict)  # profile, variant


@dataclass(frozen=True)
class AnalyzeResult:
    analyses: list[Analysis]
    others: list[Analysis]  # of --compare
    comparison: Comparison | None
    out_dir: Path
    written: list[Path]
    plot_note: str | None


def analyze_path(path: Path, layers: int | None, max_bytes: int,
                 meta: dict[str, object] | None = None) -> list[Analysis]:
    """One Analysis (with its findings) per trace file at `path` (a file or a directory)."""
    found = []
    for file in chrome.trace_files(path):
        analysis = analyze(chrome.load(file, max_bytes), meta)
        signatures.judge(analysis, layers)
        found.append(analysis)
    return found


def analyze_traces(request: AnalyzeRequest, *, plot: PlotWriter) -> AnalyzeResult:
    """Analyze, compare the first file of each side when asked, write JSON, markdown, chart.

    With several files (one per TP rank) each is analyzed; `--compare` compares the first file
    of each side (sorted by name: rank 0).
    """
    if request.layers is not None and request.layers < 1:
        raise UsageError(f"--layers {request.layers}: must be at least 1",
                         hint="leave --layers out to read every layer the trace holds")
    meta: dict[str, object] = {k: v for k, v in request.header.items() if v}
    analyses = analyze_path(request.path, request.layers, request.max_bytes, meta)
    others = (analyze_path(request.compare, request.layers, request.max_bytes)
              if request.compare else [])
    comparison = report.compare(analyses[0], others[0]) if others else None
    out = request.out_dir or default_out_dir()
    written = report.write(analyses, comparison, request.header, out)
    charts, note = plot(analyses, comparison, out)
    return AnalyzeResult(analyses=analyses, others=others, comparison=comparison, out_dir=out,
                         written=written + charts, plot_note=note)


@dataclass(frozen=True)
class CapturePlan:
    """`trace capture`'s one plan: the server to profile (its URL, where its profiler writes,
    what it runs) and how (the load, the steps, the wait, where the files go)."""

    base_url: str
    source: cap.TraceSource
    server_dir: str  # sent as output_dir: the server's own path of `source`
    concurrency: int
    steps: int
    profile: str | None = None
    variant: str | None = None
    out_dir: Path | None = None
    wait_s: float = 300.0
    warmup_s: float = 2.0  # load runs this long before the profile starts (requests decoding)
    layers: int | None = None
    max_bytes: int = chrome.DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class CaptureResult:
    plan: CapturePlan
    traces: list[Path]
    stopped_by_us: bool
    load: LoadSummary
    analysis: AnalyzeResult


def capture(plan: CapturePlan, *, http: Callable[[], httpx.Client], load: LoadHolder,
            clock: Clock, plot: PlotWriter) -> CaptureResult:
    """Hold the load, profile `steps` decode steps, collect the files, analyze them."""
    if plan.concurrency < 1 or plan.steps < 1:
        raise UsageError("--concurrency and --steps must be at least 1",
                         hint="e.g. --concurrency 8 --steps 5")
    out = plan.out_dir or default_out_dir()
    held: list[LoadSummary] = []

    @contextmanager
    def hold() -> Iterator[LoadSummary]:
        with load(plan.base_url, plan.concurrency) as summary:
            held.append(summary)
            clock.sleep(plan.warmup_s)  # the requests get past prefill into decode
            yield summary

    ask = cap.ProfileAsk(output_dir=plan.server_dir, num_steps=plan.steps)
    header = {"profile": plan.profile or "", "variant": plan.variant or ""}
    try:
        with http() as client:
            profiled = cap.profile(client, plan.source, ask, out / TRACES_SUBDIR, clock,
                                   plan.wait_s, hold)
        analysis = analyze_traces(AnalyzeRequest(path=out / TRACES_SUBDIR, out_dir=out,
                                                 layers=plan.layers,
                                                 max_bytes=plan.max_bytes, header=header),
                                  plot=plot)
    except KeyboardInterrupt as stopped:  # the profile was stopped; say so in the report
        report.write_partial(header, stop_reason(stopped), out)
        raise stop_error(stopped, "trace capture", out / report.ANALYSIS_JSON) from None
    return CaptureResult(plan=plan, traces=profiled.files, stopped_by_us=profiled.stopped_by_us,
                         load=held[0], analysis=analysis)


def server_trace_dir(env: dict[str, str], now: dt.datetime | None = None) -> str:
    """A fresh directory under the server's profiler directory (its launch environment's
    SGLANG_TORCH_PROFILER_DIR, else sglang's /tmp), so every file there is this capture's."""
    base = env.get(cap.PROFILER_DIR_ENV) or cap.DEFAULT_PROFILER_DIR
    return f"{base.rstrip('/')}/opsctl-trace-{stamp(now)}"
