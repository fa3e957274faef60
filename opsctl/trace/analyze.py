"""Per decode step: where the GPU time and the host time of a profiled server go.

Finding the steps (first rule that applies; the analysis records which one it used):

1. `annotation`: record_function ranges named `step[DECODE ...]` (the span sglang 0.5.23 wraps
   every forward in; prefill and other modes are counted and skipped) or else `ProfilerStep#N`
   (torch.profiler's own, from `prof.step()`). A step runs from its range's start to the next
   step's start, so the host work between forwards (sampling, scheduling) belongs to it.
2. `graph-launch`: no such ranges (a release that sets none), but `cudaGraphLaunch` calls: each
   decode forward under CUDA graphs is one graph launch, so a step runs from one launch to the next.
   (Piecewise or split graphs launch several per forward; then a "step" is one graph.)
3. `whole-trace`: neither: the whole trace is one step, and no per-step figure is claimed.

A GPU event belongs to the step in which the host call that launched it (same `correlation`)
was made; one with no known launcher belongs to the step in which it started. Per step: the
period (to the next step's start; the last step ends at its last GPU event), the GPU busy time
(the union of its kernels, copies and sets), GPU time per kernel name, inclusive host time per
CPU op, and host syncs. The step period and GPU busy time are medians over the steps (the first
step after the profiler starts runs slow); per-kernel and per-op figures are means per step.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from opsctl.trace.chrome import HOST_CALL_CATS, Event, Trace

STEP_DECODE = re.compile(r"^step\[DECODE\b")
STEP_ANY_MODE = re.compile(r"^step\[")
STEP_PROFILER = re.compile(r"^ProfilerStep#\d+$")
GRAPH_LAUNCH = ("cudaGraphLaunch", "cuGraphLaunch")
# Blocking host calls, by exact name; a cudaMemcpyAsync blocks too when its copy goes from the
# device to pageable host memory (`.item()`, `.tolist()`, `.cpu()`), told by its GPU copy's name.
SYNC_CALLS = frozenset(("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                        "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
                        "cudaMemcpy"))
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense")
CAST_OPS = ("aten::to", "aten::_to_copy", "aten::copy_")
# Kernel kinds, first match wins (lower-cased name). "copy" is an element-wise copy or cast,
# the shape of `tensor.to(dtype)`; concatenations and index kernels are "other".
KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("nccl", re.compile(r"nccl|all_?reduce|allgather|reduce_?scatter|cross_device_reduce")),
    ("gather_cast", re.compile(r"gather_cast")),
    ("moe", re.compile(r"moe|expert|grouped_gemm|group_gemm")),
    ("copy", re.compile(r"direct_copy|copy_kernel|(?<![a-z])cast|convert_?(fp|bf|dtype)")),
    ("attention", re.compile(r"attention|attn|flash|fmha|mla|softmax")),
    ("gemm", re.compile(r"gemm|cutlass|nvjet|xmma|cublas|matmul|wgmma|splitk")),
)
TOP_N = 12


def kind_of(event: Event) -> str:
    if event.cat == "gpu_memcpy":
        return "memcpy"
    if event.cat == "gpu_memset":
        return "memset"
    lowered = event.name.lower()
    for kind, pattern in KINDS:
        if pattern.search(lowered):
            return kind
    return "other"


def short_name(name: str) -> str:
    """A readable name: `void at::native::unrolled_elementwise_kernel<at::native::
    direct_copy_kernel_cuda(...)::{lambda(c10::BFloat16)#1}, ...>(...)` ->
    `unrolled_elementwise_kernel<direct_copy_kernel_cuda, BFloat16>` (the functor and, where
    torch names it, the element type: what tells one elementwise kernel from another)."""
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "").strip()
    cut = min((i for i in (text.find("<"), text.find("(")) if i >= 0), default=len(text))
    base = text[:cut].rsplit("::", 1)[-1] or text[:60]
    if text[cut:cut + 1] != "<" or "elementwise_kernel" not in base:
        return base[:80]
    inner = _elementwise_inner(text, cut)
    return f"{base}<{inner}>" if inner else base


def _elementwise_inner(text: str, cut: int) -> str:
    """An elementwise kernel's functor and element type, as far as its name tells them."""
    words = re.findall(r"[A-Za-z_]\w*", text[cut:])
    functors = [w for w in words if w.endswith(("_kernel", "_cuda", "_impl"))
                and not w.startswith("gpu_kernel")]
    dtype = re.search(r"lambda\((?:c10::)?(\w+)\)", text) if functors else None
    functors = functors or [w for w in words if "Functor" in w][-1:]
    return ", ".join(([functors[0]] if functors else []) + ([dtype.group(1)] if dtype else []))


@dataclass
class Row:
    """A kernel, CPU op or kind: per-step means over the steps."""

    name: str
    kind: str
    count: float  # per step
    ms: float  # per step
    share: float  # of the step's GPU busy time (kernels), of the step period (CPU ops, syncs)
    full_name: str = ""
    instance_us: list[float] = field(default_factory=list)  # one step's instances (kernels)
    input_dims: list[str] = field(default_factory=list)  # distinct shapes seen (CPU ops)


@dataclass
class Finding:
    """A known signature found in the trace, with a plain verdict and the figures behind it."""

    signature: str
    severity: str  # "bottleneck" (fix this first), "notable", or "info"
    verdict: str
    evidence: dict[str, object]


@dataclass
class StepSummary:
    index: int
    label: str
    period_ms: float
    gpu_busy_ms: float
    kernels: int
    top_kernel: str
    top_share: float


@dataclass
class Analysis:
    file: str
    device: str | None
    step_rule: str
    steps: int
    skipped_steps: int  # annotated forwards of another mode (prefill, ...)
    step_ms: float
    gpu_busy_ms: float
    idle_share: float
    graph_launches: float  # per step
    host_launches: float  # kernel launch calls per step
    kernels: list[Row]
    kinds: list[Row]
    copies: list[Row]
    cpu_ops: list[Row]
    cast_ops: list[Row]  # aten::to / _to_copy / copy_, with their input shapes when recorded
    syncs: list[Row]
    per_step: list[StepSummary]
    meta: dict[str, object]
    findings: list[Finding] = field(default_factory=list)


@dataclass
class _Window:
    label: str
    start: float
    end: float | None = None  # None: up to the next window
    gpu: list[Event] = field(default_factory=list)
    host: list[Event] = field(default_factory=list)


def _annotated_steps(events: list[Event]) -> tuple[list[Event], int]:
    """The step annotations (decode steps, else profiler steps) and how many steps of other
    modes were left out."""
    notes = [e for e in events if e.cat == "user_annotation"]
    decode = [e for e in notes if STEP_DECODE.match(e.name)]
    other_modes = sum(1 for e in notes if STEP_ANY_MODE.match(e.name)) - len(decode)
    if decode:
        return decode, other_modes
    return [e for e in notes if STEP_PROFILER.match(e.name)], other_modes


def _windows(events: list[Event]) -> tuple[str, list[_Window], int]:
    chosen, other_modes = _annotated_steps(events)
    if chosen:
        return "annotation", [_Window(e.name, e.ts) for e in chosen], other_modes
    launches = [e for e in events if e.cat in HOST_CALL_CATS and e.name.startswith(GRAPH_LAUNCH)]
    if launches:
        return "graph-launch", [_Window(e.name, e.ts) for e in launches], 0
    start = min((e.ts for e in events), default=0.0)
    return "whole-trace", [_Window("trace", start)], 0


def _place(windows: list[_Window], ts: float) -> _Window | None:
    """The window that holds `ts` (windows sorted by start; each runs to the next)."""
    lo, hi = 0, len(windows) - 1
    if not windows or ts < windows[0].start:
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if windows[mid].start <= ts:
            lo = mid
        else:
            hi = mid - 1
    return windows[lo]


def _union_us(events: Iterable[Event]) -> float:
    total, cur_start, cur_end = 0.0, None, None
    for e in sorted(events, key=lambda e: e.ts):
        if cur_end is None or e.ts > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = e.ts, e.end
        else:
            cur_end = max(cur_end, e.end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


def _assign(trace: Trace) -> tuple[str, list[_Window], int]:
    events = trace.events
    rule, windows, skipped = _windows(events)
    windows.sort(key=lambda w: w.start)
    launcher = {e.correlation: e for e in events
                if e.cat in HOST_CALL_CATS and e.correlation is not None}
    for e in events:
        if e.on_gpu:
            call = launcher.get(e.correlation) if e.correlation is not None else None
            window = _place(windows, call.ts if call else e.ts)
            if window is not None:
                window.gpu.append(e)
        elif e.cat != "user_annotation":
            window = _place(windows, e.ts)
            if window is not None:
                window.host.append(e)
    for here, after in zip(windows, windows[1:], strict=False):
        here.end = after.start
    if windows:
        last = windows[-1]
        last.end = max([e.end for e in last.gpu + last.host] or [last.start])
    return rule, windows, skipped


def _rows(per_step: list[dict[str, list[Event]]], steps: int, denominator: float,
          kind: bool) -> list[Row]:
    names = {name for step in per_step for name in step}
    rows = []
    for name in names:
        row = _row(name, per_step, steps, denominator)
        if kind:
            _as_kernel(row, name, per_step)
        rows.append(row)
    return sorted(rows, key=lambda r: -r.ms)


def _row(name: str, per_step: list[dict[str, list[Event]]], steps: int,
         denominator: float) -> Row:
    """The per-step means of the events called `name`."""
    instances = [e for step in per_step for e in step.get(name, [])]
    ms = sum(e.dur for e in instances) / steps / 1000.0
    dims = _largest_first(e.args["Input Dims"] for e in instances if "Input Dims" in e.args)
    return Row(name=name, kind="", count=len(instances) / steps, ms=ms,
               share=ms / denominator if denominator else 0.0, full_name=name[:400],
               input_dims=dims[:4])


def _as_kernel(row: Row, name: str, per_step: list[dict[str, list[Event]]]) -> None:
    """A kernel's row: its short name, its kind and one step's instance durations."""
    sample = next(step[name] for step in per_step if name in step)
    row.name, row.kind = short_name(name), kind_of(sample[0])
    row.instance_us = [round(e.dur, 3) for e in sample]


def _largest_first(all_dims: Iterable[object]) -> list[str]:
    """Distinct `Input Dims`, the one whose first tensor has the most elements first."""

    def elements(dims: object) -> int:
        first = dims[0] if isinstance(dims, list) and dims else []
        if not isinstance(first, list) or not all(isinstance(n, int) for n in first):
            return 0
        return math.prod(first) if first else 0

    distinct = {json.dumps(d): d for d in all_dims}
    return [text for text, d in sorted(distinct.items(), key=lambda item: -elements(item[1]))]


Steps = list[dict[str, list[Event]]]


def analyze(trace: Trace, meta: dict[str, object] | None = None) -> Analysis:
    """Steps, per-step means and the tables; `signatures.judge` adds the findings."""
    rule, windows, skipped = _assign(trace)
    windows = [w for w in windows if w.gpu or w.host] or windows[:1]
    n = max(len(windows), 1)
    periods = [((w.end or w.start) - w.start) / 1000.0 for w in windows]
    busy = [_union_us(w.gpu) / 1000.0 for w in windows]
    step_ms, busy_ms = _median(periods), _median(busy)
    blocking = _blocking_copies(trace)
    gpu_steps: Steps = []
    cpu_steps: Steps = []
    sync_steps: Steps = []
    summaries = []
    for index, window in enumerate(windows):
        gpu, cpu, syncs = _split_step(window, blocking)
        gpu_steps.append(gpu)
        cpu_steps.append(cpu)
        sync_steps.append(syncs)
        summaries.append(_step_summary(index, window, gpu, periods[index], busy[index]))
    kernels = _rows(gpu_steps, n, busy_ms, kind=True)
    # Host figures are means per step, so their shares are of the mean period.
    mean_period = _mean(periods)
    cpu_rows = _rows(cpu_steps, n, mean_period, kind=False)
    graph_launches, host_launches = _launches(windows, n)
    return Analysis(
        file=trace.path,
        device=_device_name(trace),
        step_rule=rule, steps=len(windows), skipped_steps=skipped,
        step_ms=step_ms, gpu_busy_ms=busy_ms,
        idle_share=_idle_share(busy_ms, step_ms),
        graph_launches=graph_launches,
        host_launches=host_launches,
        kernels=kernels, kinds=_kinds(kernels),
        copies=[r for r in kernels if r.kind in ("copy", "memcpy", "gather_cast")],
        cpu_ops=cpu_rows[:TOP_N],
        cast_ops=[row for row in cpu_rows if row.name in CAST_OPS],
        syncs=_rows(sync_steps, n, mean_period, kind=False),
        per_step=summaries,
        meta={**_recorded(trace), **(meta or {})},
    )


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _idle_share(busy_ms: float, step_ms: float) -> float:
    """The share of the step the GPU ran nothing."""
    return max(0.0, 1.0 - busy_ms / step_ms) if step_ms else 0.0


def _blocking_copies(trace: Trace) -> set[int | None]:
    """The correlation ids of device-to-host copies into pageable memory (the host waits)."""
    return {e.correlation for e in trace.events
            if e.cat == "gpu_memcpy" and e.correlation is not None
            and "DtoH" in e.name and "Pageable" in e.name}


def _split_step(
    window: _Window, blocking: set[int | None]
) -> tuple[dict[str, list[Event]], dict[str, list[Event]], dict[str, list[Event]]]:
    """One step's kernels, CPU ops and host syncs, each by name."""
    gpu: dict[str, list[Event]] = defaultdict(list)
    cpu: dict[str, list[Event]] = defaultdict(list)
    syncs: dict[str, list[Event]] = defaultdict(list)
    for e in window.gpu:
        gpu[e.name].append(e)
    for e in window.host:
        if e.cat == "cpu_op":
            cpu[e.name].append(e)
        if e.name in SYNC_CALLS or e.name in SYNC_OPS:
            syncs[e.name].append(e)
        elif e.cat in HOST_CALL_CATS and e.correlation in blocking:
            syncs[f"{e.name} (DtoH to pageable memory)"].append(e)
    return gpu, cpu, syncs


def _step_summary(index: int, window: _Window, gpu: dict[str, list[Event]], period_ms: float,
                  busy_ms: float) -> StepSummary:
    """One step's line: its period, GPU busy time and the kernel that took most of it."""
    summary = StepSummary(index=index, label=window.label, period_ms=round(period_ms, 4),
                          gpu_busy_ms=round(busy_ms, 4), kernels=len(window.gpu),
                          top_kernel="-", top_share=0.0)
    if not gpu:
        return summary
    name, events = max(gpu.items(), key=lambda item: sum(e.dur for e in item[1]))
    summary.top_kernel = short_name(name)
    if busy_ms:
        summary.top_share = round(sum(e.dur for e in events) / 1000.0 / busy_ms, 4)
    return summary


def _kinds(kernels: list[Row]) -> list[Row]:
    """The kernel rows summed per kind, the costliest first."""
    by_kind: dict[str, list[Row]] = defaultdict(list)
    for row in kernels:
        by_kind[row.kind].append(row)
    kinds = [Row(name=k, kind=k, count=sum(r.count for r in rs), ms=sum(r.ms for r in rs),
                 share=sum(r.share for r in rs)) for k, rs in by_kind.items()]
    return sorted(kinds, key=lambda r: -r.ms)


def _launches(windows: list[_Window], steps: int) -> tuple[float, float]:
    """CUDA-graph launches and other kernel launches from the host, per step."""
    calls = [e for w in windows for e in w.host if e.cat in HOST_CALL_CATS]
    graph = sum(1 for e in calls if e.name.startswith(GRAPH_LAUNCH))
    host = sum(1 for e in calls if "Launch" in e.name and not e.name.startswith(GRAPH_LAUNCH))
    return graph / steps, host / steps


def _device_name(trace: Trace) -> str | None:
    """The first GPU's name as the trace's deviceProperties give it."""
    device = trace.meta.get("deviceProperties")
    if not isinstance(device, list) or not device or not isinstance(device[0], dict):
        return None
    return str(device[0].get("name"))


def _recorded(trace: Trace) -> dict[str, object]:
    """What the capture wrote into the trace (`opsctl` key: variant, profile, layers...)."""
    recorded = trace.meta.get("opsctl")
    return dict(recorded) if isinstance(recorded, dict) else {}
