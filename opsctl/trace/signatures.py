"""Known bottleneck signatures, each a rule over an Analysis with a plain verdict.

Rules (shares are of the step's GPU busy time unless said otherwise; figures per step):

- `full_pool_kv_cast`: the largest element-wise copy/cast kernel (`kind == "copy"`, the kernel
  `tensor.to(dtype)` runs, e.g. `unrolled_elementwise_kernel<direct_copy_kernel_cuda>`) runs
  at least CAST_MIN_REPEAT times per step (once per layer) and takes at least CAST_SHARE. Small
  per-layer casts of the active rows (a KV write, a gather's cast) repeat as often but take
  little time; a cast of the whole pool per layer takes most of the step whatever the active
  token count, because its size is the pool's. Instances of equal duration (low spread) and,
  when shapes were recorded, an `aten::to`/`aten::_to_copy` input of pool shape back it up.
- `moe_gemm`: kernels named like MoE/expert/grouped GEMMs take at least MOE_SHARE.
- `nccl_allreduce`: NCCL / custom all-reduce kernels take at least NCCL_SHARE.
- `gpu_idle`: the GPU is idle for at least IDLE_SHARE of the step period. With graph launches in
  the trace the gap is host work between replays; without, it is launch overhead (no CUDA graphs).
- `host_sync`: at least SYNC_MIN_COUNT blocking syncs per step (cudaStreamSynchronize,
  cudaDeviceSynchronize, cudaEventSynchronize, blocking cudaMemcpy, aten::item), or syncs that
  block the host for at least SYNC_SHARE of the step period.
- `gather_then_cast` (info): opsctl's gather-then-cast kernel runs: the patched path is active.
"""

from __future__ import annotations

import statistics

from opsctl.trace.analyze import Analysis, Finding, Row

CAST_SHARE = 0.25
CAST_MIN_REPEAT = 4
MOE_SHARE = 0.15
NCCL_SHARE = 0.10
IDLE_SHARE = 0.20
SYNC_MIN_COUNT = 8
SYNC_SHARE = 0.10
# Above this share a named kind is what to fix first.
BOTTLENECK_SHARE = 0.30


def _kind(analysis: Analysis, kind: str) -> Row | None:
    return next((row for row in analysis.kinds if row.kind == kind), None)


def _spread(values: list[float]) -> float:
    """Coefficient of variation of the instances' durations (0 = all equal)."""
    if len(values) < 2 or not statistics.fmean(values):
        return 0.0
    return statistics.pstdev(values) / statistics.fmean(values)


def _layers(analysis: Analysis, layers: int | None) -> int | None:
    recorded = analysis.meta.get("layers")
    if layers:
        return layers
    return recorded if isinstance(recorded, int) and recorded > 0 else None


def full_pool_cast(analysis: Analysis, layers: int | None = None) -> Finding | None:
    casts = [row for row in analysis.kernels if row.kind == "copy"]
    if not casts:
        return None
    top = casts[0]  # kernels are sorted by time
    if top.count < CAST_MIN_REPEAT or top.share < CAST_SHARE:
        return None
    each = statistics.fmean(top.instance_us) if top.instance_us else top.ms * 1000 / top.count
    evidence: dict[str, object] = {
        "kernel": top.name, "per_step": round(top.count, 2), "ms_per_step": round(top.ms, 4),
        "share": round(top.share, 4), "us_each": round(each, 2),
        "spread": round(_spread(top.instance_us), 3),
    }
    layer_count = _layers(analysis, layers)
    per_layer = ""
    if layer_count:
        evidence["per_layer"] = round(top.count / layer_count, 2)
        per_layer = f", {top.count / layer_count:g} per layer of {layer_count}"
    shapes = [dims for row in analysis.cast_ops for dims in row.input_dims]
    if shapes:
        evidence["cast_input_dims"] = shapes[:2]
    return Finding(
        signature="full_pool_kv_cast", severity="bottleneck",
        verdict=(f"Full-pool KV cast: {top.count:g} copy/cast kernels per step "
                 f"({top.name}, {each:.0f} us each{per_layer}) take {top.share:.0%} of GPU "
                 f"time ({top.ms:.2f} ms/step). This is the stock `pool.to(bf16)` of the whole "
                 "FP8 KV pool per layer per step: its cost follows the pool size, not the "
                 "active tokens. Fix: the gather-then-cast variant, or a BF16 KV cache."),
        evidence=evidence)


def _share_finding(analysis: Analysis, kind: str, floor: float, signature: str,
                   verdict: str) -> Finding | None:
    row = _kind(analysis, kind)
    if row is None or row.share < floor:
        return None
    severity = "bottleneck" if row.share >= BOTTLENECK_SHARE else "notable"
    each = row.ms * 1000 / row.count if row.count else 0.0
    return Finding(
        signature=signature, severity=severity,
        verdict=verdict.format(share=row.share, ms=row.ms, count=row.count, each=each),
        evidence={"share": round(row.share, 4), "ms_per_step": round(row.ms, 4),
                  "per_step": round(row.count, 2), "us_each": round(each, 2)})


def gpu_idle(analysis: Analysis) -> Finding | None:
    if (analysis.step_rule == "whole-trace" or not analysis.gpu_busy_ms
            or analysis.idle_share < IDLE_SHARE):
        return None
    idle_ms = analysis.step_ms - analysis.gpu_busy_ms
    if analysis.graph_launches:
        cause = (f"between CUDA-graph replays ({analysis.graph_launches:g} per step): host-side "
                 "scheduling, sampling or input preparation keeps the GPU waiting")
    else:
        cause = (f"with {analysis.host_launches:g} kernel launches per step from the host and no "
                 "CUDA-graph launch: launch overhead; decode is not running under CUDA graphs")
    return Finding(
        signature="gpu_idle",
        severity="bottleneck" if analysis.idle_share >= BOTTLENECK_SHARE else "notable",
        verdict=(f"GPU idle {analysis.idle_share:.0%} of each step ({idle_ms:.2f} of "
                 f"{analysis.step_ms:.2f} ms) {cause}."),
        evidence={"idle_share": round(analysis.idle_share, 4), "idle_ms": round(idle_ms, 4),
                  "graph_launches_per_step": analysis.graph_launches,
                  "host_launches_per_step": analysis.host_launches})


def host_syncs(analysis: Analysis) -> Finding | None:
    count = sum(row.count for row in analysis.syncs)
    blocked = sum(row.ms for row in analysis.syncs)
    share = sum(row.share for row in analysis.syncs)
    if count < SYNC_MIN_COUNT and (count == 0 or share < SYNC_SHARE):
        return None
    names = ", ".join(f"{row.name} x{row.count:g}" for row in analysis.syncs[:3])
    return Finding(
        signature="host_sync", severity="notable",
        verdict=(f"Host syncs: {count:g} per step ({names}) block the host "
                 f"{blocked:.2f} ms/step ({share:.0%} of the step): while the host waits for "
                 "the GPU nothing new is launched, so host and GPU work run in series (a "
                 "plan() with GPU metadata per layer shows up here as many syncs)."),
        evidence={"per_step": round(count, 2), "ms_per_step": round(blocked, 4),
                  "share": round(share, 4)})


def gather_then_cast(analysis: Analysis) -> Finding | None:
    row = _kind(analysis, "gather_cast")
    if row is None:
        return None
    return Finding(
        signature="gather_then_cast", severity="info",
        verdict=(f"The gather-then-cast kernel runs ({row.count:g} per step, {row.share:.1%} of "
                 "GPU time): the patched attention prep is active."),
        evidence={"per_step": round(row.count, 2), "ms_per_step": round(row.ms, 4),
                  "share": round(row.share, 4)})


def judge(analysis: Analysis, layers: int | None = None) -> list[Finding]:
    """Every signature found, the most expensive first; also stored on `analysis.findings`."""
    found = [
        full_pool_cast(analysis, layers),
        _share_finding(analysis, "moe", MOE_SHARE, "moe_gemm",
                       "MoE expert GEMMs take {share:.0%} of GPU time ({ms:.2f} ms/step, "
                       "{count:g} kernels): the MoE runner backend and its autotuning set "
                       "this cost."),
        _share_finding(analysis, "nccl", NCCL_SHARE, "nccl_allreduce",
                       "NCCL all-reduce takes {share:.0%} of GPU time ({count:g} per step, "
                       "{each:.0f} us each): over PCIe (no NVLink) every all-reduce is "
                       "latency-bound; check the custom all-reduce and NCCL_P2P_LEVEL."),
        gpu_idle(analysis),
        host_syncs(analysis),
        gather_then_cast(analysis),
    ]
    order = {"bottleneck": 0, "notable": 1, "info": 2}
    findings = sorted((f for f in found if f is not None), key=lambda f: order[f.severity])
    analysis.findings = findings
    return findings
