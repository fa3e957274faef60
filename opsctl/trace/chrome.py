"""Chrome trace JSON as torch.profiler's `export_chrome_trace` writes it (what sglang's
/start_profile leaves in its output directory): reading it within a size bound, the events the
analyzer uses, and shrinking a trace to those events for a committed fixture.

Event categories used (kineto's names): `kernel`, `gpu_memcpy`, `gpu_memset` (GPU activity, each
with `args.correlation`), `cuda_runtime` and `cuda_driver` (the host calls that launched them,
same correlation), `cpu_op` (aten ops; `Input Dims` when shapes were recorded) and
`user_annotation` (record_function ranges: sglang's `step[DECODE bs=N]`, `ProfilerStep#N`).
Everything else (python stacks, flow arrows, GPU-side copies of annotations) is dropped.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl.core.errors import UsageError
from opsctl.core.files import atomic_write_bytes

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CALL_CATS = ("cuda_runtime", "cuda_driver")
CPU_CATS = ("cpu_op", "user_annotation")
KEPT_CATS = GPU_CATS + HOST_CALL_CATS + CPU_CATS
# Per-event args the analyzer reads; the rest (stack, registers, occupancy...) is dropped.
KEPT_ARGS = ("correlation", "External id", "Input Dims", "bytes", "stream", "device", "grid",
             "block")
# Top-level keys kept: they say what device and build the trace came from.
KEPT_TOP = ("schemaVersion", "deviceProperties", "cuda_runtime_version", "cuda_driver_version",
            "distributedInfo", "opsctl")
TRACE_SUFFIXES = (".json", ".json.gz")
# Real decode traces with stacks run to hundreds of MB; beyond this something else was captured.
DEFAULT_MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class Event:
    """One complete ("X") event, in microseconds from the trace's own origin."""

    name: str
    cat: str
    ts: float
    dur: float
    pid: int | str
    tid: int | str
    correlation: int | None
    args: dict[str, Any]

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def on_gpu(self) -> bool:
        return self.cat in GPU_CATS


@dataclass(frozen=True)
class Trace:
    path: str
    events: list[Event]
    meta: dict[str, Any]  # the kept top-level keys (opsctl: what the capture recorded)


def trace_files(path: Path) -> list[Path]:
    """`path` itself, or the trace files directly in the directory `path`, sorted."""
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
        if not found:
            raise UsageError(f"{path}: no *.json or *.json.gz trace in this directory",
                             hint="pass a trace file, or the directory `trace capture` wrote")
        return found
    if not path.is_file():
        raise UsageError(f"{path}: no such file or directory",
                         hint="pass a trace file (.json or .json.gz) or a folder holding them")
    return [path]


def read_json(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """The trace's JSON object; refuses more than `max_bytes` decompressed (a gzip bomb, or
    the wrong file) and anything that is not a Chrome trace object."""
    try:
        with path.open("rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gzipped else path.open("rb")) as handle:
            data = handle.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise UsageError(f"{path}: cannot read the trace: {exc}",
                         hint="is it a whole .json or .json.gz trace the profiler wrote?") from None
    if len(data) > max_bytes:
        raise UsageError(f"{path}: more than {max_bytes >> 20} MiB of trace JSON",
                         hint="capture fewer steps, or raise the bound with --max-mb")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not JSON: {exc}",
                         hint="a Chrome trace (the profiler's .json or .json.gz) is JSON") from None
    if isinstance(doc, list):  # the bare-array form of the format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UsageError(f"{path}: not a Chrome trace (no traceEvents list)",
                         hint="pass what torch.profiler's export_chrome_trace / sglang's "
                         "/start_profile wrote")
    return doc


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    # NaN/Infinity (Python's json reads them) would reach the report as invalid JSON.
    return number if math.isfinite(number) else None


def parse_event(raw: Any) -> Event | None:
    """An Event for a complete event of a kept category, else None."""
    if not isinstance(raw, dict) or raw.get("ph") != "X" or raw.get("cat") not in KEPT_CATS:
        return None
    ts, dur = _number(raw.get("ts")), _number(raw.get("dur"))
    if ts is None or dur is None or dur < 0:
        return None
    found = raw.get("args")
    args: dict[str, Any] = found if isinstance(found, dict) else {}
    corr = args.get("correlation")
    return Event(name=str(raw.get("name", "")), cat=str(raw["cat"]), ts=ts, dur=dur,
                 pid=raw.get("pid", 0), tid=raw.get("tid", 0),
                 correlation=corr if isinstance(corr, int) and not isinstance(corr, bool) else None,
                 args={k: args[k] for k in KEPT_ARGS if k in args})


def load(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Trace:
    doc = read_json(path, max_bytes)
    events = [e for e in (parse_event(raw) for raw in doc["traceEvents"]) if e is not None]
    events.sort(key=lambda e: (e.ts, -e.dur))
    return Trace(path=str(path), events=events,
                 meta={k: doc[k] for k in KEPT_TOP if k in doc})


def shrink(doc: dict[str, Any], extra_meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trace reduced to what `load` keeps, in the same format (loads in Perfetto too).

    Timestamps are rebased to the first kept event and rounded to 1 ns, which both keep the
    order and the durations exactly as recorded and make the gzip small.
    """
    kept = []
    for raw in doc.get("traceEvents", []):
        event = parse_event(raw)
        if event is not None:
            kept.append(event)
    origin = min((e.ts for e in kept), default=0.0)
    out: dict[str, Any] = {k: doc[k] for k in KEPT_TOP if k in doc}
    if extra_meta:
        out["opsctl"] = {**out.get("opsctl", {}), **extra_meta}
    out["traceEvents"] = [
        {"ph": "X", "cat": e.cat, "name": e.name, "pid": e.pid, "tid": e.tid,
         "ts": round(e.ts - origin, 3), "dur": round(e.dur, 3),
         **({"args": {**e.args, **({"correlation": e.correlation}
                                   if e.correlation is not None else {})}}
            if e.args or e.correlation is not None else {})}
        for e in sorted(kept, key=lambda e: (e.ts, -e.dur))
    ]
    return out


def write_gz(doc: dict[str, Any], path: Path) -> Path:
    """Compact JSON, gzip level 9, mtime 0 (the same trace gives the same bytes)."""
    data = json.dumps(doc, separators=(",", ":")).encode()
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", compresslevel=9, mtime=0, filename="") as handle:
        handle.write(data)
    return atomic_write_bytes(path, packed.getvalue())
