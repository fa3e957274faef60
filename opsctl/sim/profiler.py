"""sglang's profiler endpoints, /start_profile and /stop_profile, writing a synthetic trace.

As sglang 0.5.23 behaves (``ProfileReq``: it takes ``output_dir``, ``num_steps``, ``activities``,
``with_stack``, ``record_shapes``, ``profile_prefix``...): /start_profile answers ``Start
profiling.`` at once; the output directory is the request's ``output_dir``, else
``SGLANG_TORCH_PROFILER_DIR``, else ``/tmp``. With ``num_steps`` the profile stops by itself after
that many forward steps; steps are counted only while requests run, as the scheduler counts
forwards. Without it, /stop_profile stops it. A start while one runs, or a stop while none does,
answers 500 (sglang raises RuntimeError). On stop each TP rank's file ``[<prefix>-]<profile
id>-TP-<rank>.trace.json.gz`` appears in the directory (written beside and renamed, so a poller
never reads half of one).

The trace is deterministic and in torch.profiler's Chrome format: per decode step a
``step[DECODE bs=N]`` range (as 0.5.23 wraps each forward), one ``cudaGraphLaunch`` and
SIM_TRACE_LAYERS layers of kernels filling 90% of the step's ITL. Whether a layer starts with the
stock full-pool cast (``unrolled_elementwise_kernel<direct_copy_kernel_cuda>``) or opsctl's
gather-then-cast kernel follows the behaviour knob ``trace_cast``: ``auto`` (the resolved
settings: flashinfer + FP8 KV casts unless the patch switch is on), ``on`` or ``off``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import time
from pathlib import Path
from typing import Any

from opsctl.sim.engine import Engine
from opsctl.sim.info import ServerView
from opsctl.sim.patchmarker import FP8_KV, PATCHED_BACKEND, SWITCH_ENV
from opsctl.sim.state import BehaviourBox
from opsctl.sim.wire import Request, Response

PROFILER_DIR_ENV = "SGLANG_TORCH_PROFILER_DIR"
DEFAULT_PROFILER_DIR = "/tmp"
SIM_TRACE_LAYERS = 8
GPU_BUSY = 0.9  # of each step's ITL; the rest is the host's turn between graph replays
CAST = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() "
        "const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, "
        "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast"
        "<1>, at::native::memory::StoreWithCast<1> >(int, ...)")  # as torch names `pool.to(bf16)`
GATHER = "gather_cast_rows"
# (kernel name, share of a layer's GPU time without the cast); the cast, when on, takes
# CAST_SHARE of the step and these share the rest.
LAYER_KERNELS = (
    ("void flashinfer::mla::BatchMLAPagedAttentionKernel<false, 512, 64>", 0.16),
    ("nvjet_sm120_tst_64x8_64x16_4x1_v_bz_NNT", 0.30),
    ("void flashinfer::cutlass_fused_moe_kernel<__nv_fp4_e2m1, 128>", 0.32),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0.20),
)
GATHER_SHARE = 0.02
CAST_SHARE = 0.65


def _text(status: int, body: str) -> Response:
    return Response(status, body.encode(), content_type="text/plain; charset=utf-8")


class SimProfiler:
    """The profiler state of one server: at most one profile at a time, as the scheduler."""

    def __init__(self, view: ServerView, box: BehaviourBox, engine: Engine) -> None:
        self._view, self._box, self._engine = view, box, engine
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def start(self, request: Request) -> Response:
        try:
            body = request.json() or {}
        except (ValueError, UnicodeDecodeError):
            return _text(400, "body is not JSON")
        if not isinstance(body, dict):
            return _text(400, "body must be a JSON object")
        steps = body.get("num_steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                                  or steps < 1):
            return _text(400, "num_steps must be a positive integer")
        if self._task is not None and not self._task.done():
            return _text(500, "Internal Server Error")  # "Profiling is already in progress."
        out = Path(body.get("output_dir") or os.environ.get(PROFILER_DIR_ENV)
                   or DEFAULT_PROFILER_DIR).expanduser()
        prefix = str(body.get("profile_prefix") or "")
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._record(out, steps, prefix, str(time.time())))
        return _text(200, "Start profiling.\n")

    async def stop(self, _: Request) -> Response:
        if self._task is None or self._task.done():
            return _text(500, "Internal Server Error")  # "Profiling is not in progress."
        self._stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        return _text(200, "Stop profiling. This will take some time.\n")

    async def _record(self, out: Path, steps: int | None, prefix: str, profile_id: str) -> None:
        recorded: list[tuple[int, float, bool]] = []  # (batch size, ITL in us, under a graph)
        cap = self._engine.graph_max_bs
        while steps is None or len(recorded) < steps:
            running = max(self._engine.running(), 1)
            itl = self._box.get().itl_seconds(running, cap)
            try:
                await asyncio.wait_for(self._stop.wait(), itl)
                break
            except TimeoutError:
                if self._engine.running() > 0:
                    recorded.append((running, itl * 1e6, cap is None or running <= cap))
        if not recorded:
            recorded.append((1, self._box.get().itl_seconds(1) * 1e6, True))
        await asyncio.to_thread(self._write, out, prefix, profile_id, recorded)

    def _casts(self) -> bool:
        knob = self._box.get().trace_cast
        if knob != "auto":
            return knob == "on"
        settings = self._view.resolved("none")
        return (settings.get("attention_backend") == PATCHED_BACKEND
                and settings.get("kv_cache_dtype") == FP8_KV
                and os.environ.get(SWITCH_ENV, "") != "1")

    def _write(self, out: Path, prefix: str, profile_id: str,
               steps: list[tuple[int, float, bool]]) -> None:
        doc = synthetic_trace(steps, casts=self._casts(), annotate=True)
        data = json.dumps(doc, separators=(",", ":")).encode()
        out.mkdir(parents=True, exist_ok=True)
        for rank in range(self._view.args.tp_size):
            name = f"{prefix + '-' if prefix else ''}{profile_id}-TP-{rank}.trace.json.gz"
            tmp = out / f".{name}.tmp"
            tmp.write_bytes(gzip.compress(data, mtime=0))
            os.replace(tmp, out / name)


def synthetic_trace(steps: list[tuple[int, float, bool]], *, casts: bool, annotate: bool
                    ) -> dict[str, Any]:
    """One decode step per (batch size, period in us, under a CUDA graph), in torch.profiler's
    Chrome trace format. A step past the graph cap launches every kernel from the host."""
    events: list[dict[str, Any]] = []
    ts, corr = 0.0, 1
    for bs, period, graphed in steps:
        if annotate:
            events.append(_x("user_annotation", f"step[DECODE bs={bs}]", ts, 300.0, 1))
        if graphed:
            events.append(_x("cuda_runtime", "cudaGraphLaunch", ts + 100.0, 20.0, 1, corr))
        per_layer = period * GPU_BUSY / SIM_TRACE_LAYERS
        gpu, host = ts + 150.0, ts + 100.0
        for _ in range(SIM_TRACE_LAYERS):
            first, first_share = (CAST, CAST_SHARE) if casts else (GATHER, GATHER_SHARE)
            layer = [(first, per_layer * first_share)]
            layer += [(name, per_layer * (1 - first_share) * share)
                      for name, share in LAYER_KERNELS]
            for name, dur in layer:
                if not graphed:
                    corr += 1
                    events.append(_x("cuda_runtime", "cudaLaunchKernel", host, 5.0, 1, corr))
                    host += 5.0
                events.append(_x("kernel", name, gpu, dur, 7, corr))
                gpu += dur
        ts += period
        corr += 1
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "opsctl-sim"}],
            "traceEvents": events}


def _x(cat: str, name: str, ts: float, dur: float, tid: int, corr: int | None = None
       ) -> dict[str, Any]:
    args = {} if corr is None else {"correlation": corr}
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": round(ts, 3),
            "dur": round(dur, 3), "args": args}
