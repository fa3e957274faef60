"""Kernel tuning on the accelerator: the shipped gather-then-cast kernel beside candidate shapes.

Same pools, index pattern (bs=1, N distinct uniformly random slots) and CUDA-graph timing as
bench/kv_gather_cast_bench.py, at the sizes issue 21 names (32K and 131K active tokens) plus 2K
and the whole pool. Every candidate runs in the same process as the shipped kernel, is checked
bit-exact against `pool.to(bf16)` at the named rows, and is timed against the same measured copy
floor. A candidate only ever informs a change to opsctl/kernels/kv_gather_cast.py (which the patch
sets hash); nothing here is installed in an image.

Candidate knobs (all compile-time):
  chunk     0 = the shipped split of a 576-wide row into 512 + 64 columns; 64 = nine 64-column
            chunks per row (every load and store the same width, all nine issued back to back)
  evict     loads of the pool rows marked evict_first (each is read once per step)
  stream    stores with the streaming cache modifier (.cs)
  unroll    row blocks per grid-stride iteration (2: the second block's ids and rows are loaded
            before the first block's stores)

    python3 bench/kv_gather_cast_tune.py --out bench/results/kv_gather_cast_tune_h200.json
(passes 1 and 2 ran earlier candidate lists: bench/results/kv_gather_cast_tune_h200_pass1.json,
_pass2.log)
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kv_gather_cast_bench import capture, copy_bandwidth_gbps, median_ms  # noqa: E402

from opsctl.kernels import kv_gather_cast  # noqa: E402

POOL_ROWS = 495_552
ROW = 576
LAYERS = 78
ACTIVE = [2_048, 32_768, 131_072, POOL_ROWS - 1]
READ_WRITE_BYTES = ROW + 2 * ROW
# (label, chunk, evict, stream, unroll, block_rows, num_warps, programs_per_sm)
CANDIDATES = [
    # pass 1 (bench/results/kv_gather_cast_tune_h200_pass1.json): shapes; "split" loads head
    # and tail before storing either, which alone beat the shipped order; chunk64 lost everywhere.
    # pass 2 (bench/results/kv_gather_cast_tune_h200_pass2.log; it stopped at a
    # .cg + evict_first candidate that ptxas refuses): evict_first loads + streaming stores
    # at 16 rows / 4 warps / 16 programs per SM was the one config under 1.3x at 32K and 131K.
    ("split+evict+stream", 0, True, True, 1, 16, 4, 8),
    ("split+evict+stream", 0, True, True, 1, 16, 4, 16),
    ("split+evict+stream", 0, True, True, 1, 16, 4, 12),
    ("split+evict+stream", 0, True, True, 1, 16, 4, 24),
    ("split+evict+stream", 0, True, True, 1, 16, 4, 32),
    ("split+evict+stream", 0, True, True, 1, 32, 4, 16),
    ("split+evict+stream", 0, True, True, 1, 8, 4, 32),
    ("split+evict+stream", 0, True, True, 1, 16, 2, 16),
    ("split+evict+stream", 0, True, True, 1, 16, 2, 32),
    ("split+evict+stream+prefetch", 0, True, True, 1, 16, 4, 16),
    ("split+stream+cg", 0, False, True, 1, 16, 4, 16),
    ("split+evict+stream", 0, True, True, 1, 16, 4, 16),
]


@triton.jit
def _load(ptrs, mask, EVICT: tl.constexpr, CG: tl.constexpr = False):
    if CG:
        return tl.load(ptrs, mask=mask, cache_modifier=".cg")  # ptxas: .cg takes no evict_first
    if EVICT:
        return tl.load(ptrs, mask=mask, eviction_policy="evict_first")
    return tl.load(ptrs, mask=mask)


@triton.jit
def _store(ptrs, value, mask, STREAM: tl.constexpr):
    if STREAM:
        tl.store(ptrs, value, mask=mask, cache_modifier=".cs")
    else:
        tl.store(ptrs, value, mask=mask)


@triton.jit
def _rows(src, dst, indices, start, first, todo, linear, num_rows, src_row_stride,
          dst_row_stride, HEAD: tl.constexpr, TAIL: tl.constexpr, CHUNK: tl.constexpr,
          BLOCK: tl.constexpr, EVICT: tl.constexpr, STREAM: tl.constexpr):
    rows = first + tl.arange(0, BLOCK)
    live = rows < todo
    if linear:  # noqa: SIM108 - a Triton branch on a device value, not a Python ternary
        ids = rows.to(tl.int64)
    else:
        ids = tl.load(indices + start + rows, mask=live, other=0).to(tl.int64)
    _convert(src, dst, ids, live, num_rows, src_row_stride, dst_row_stride, HEAD, TAIL, CHUNK,
             EVICT, STREAM, False)


@triton.jit
def _convert(src, dst, ids, live, num_rows, src_row_stride, dst_row_stride, HEAD: tl.constexpr,
             TAIL: tl.constexpr, CHUNK: tl.constexpr, EVICT: tl.constexpr,
             STREAM: tl.constexpr, CG: tl.constexpr):
    live = live & (ids >= 0) & (ids < num_rows)
    src_rows = src + ids[:, None] * src_row_stride
    dst_rows = dst + ids[:, None] * dst_row_stride
    mask = live[:, None]
    if CHUNK > 0:
        cols = tl.arange(0, CHUNK)
        for c in tl.static_range((HEAD + TAIL) // CHUNK):
            x = _load(src_rows + c * CHUNK + cols[None, :], mask, EVICT)
            _store(dst_rows + c * CHUNK + cols[None, :], x.to(dst.dtype.element_ty), mask, STREAM)
    else:
        head_cols = tl.arange(0, HEAD)
        x = _load(src_rows + head_cols[None, :], mask, EVICT, CG)
        if TAIL > 0:
            tail_cols = HEAD + tl.arange(0, TAIL)
            y = _load(src_rows + tail_cols[None, :], mask, EVICT, CG)
            _store(dst_rows + tail_cols[None, :], y.to(dst.dtype.element_ty), mask, STREAM)
        _store(dst_rows + head_cols[None, :], x.to(dst.dtype.element_ty), mask, STREAM)


@triton.jit
def _extent(indptr, bs, num_rows, linear_min_ids):
    """(first id's offset, linear?, rows to do): the count read on the device, as shipped."""
    start = tl.load(indptr)
    count = tl.load(indptr + bs) - start
    linear = count >= linear_min_ids
    return start, linear, tl.where(linear, num_rows, count)


@triton.jit
def candidate_kernel(src, dst, indices, indptr, bs, num_rows, linear_min_ids, src_row_stride,
                     dst_row_stride, HEAD: tl.constexpr, TAIL: tl.constexpr,
                     CHUNK: tl.constexpr, BLOCK: tl.constexpr, EVICT: tl.constexpr,
                     STREAM: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    start, linear, todo = _extent(indptr, bs, num_rows, linear_min_ids)
    first = pid * BLOCK * UNROLL
    while first < todo:
        for u in tl.static_range(UNROLL):
            _rows(src, dst, indices, start, first + u * BLOCK, todo, linear, num_rows,
                  src_row_stride, dst_row_stride, HEAD, TAIL, CHUNK, BLOCK, EVICT, STREAM)
        first += nprog * BLOCK * UNROLL


@triton.jit
def prefetch_kernel(src, dst, indices, indptr, bs, num_rows, linear_min_ids, src_row_stride,
                    dst_row_stride, HEAD: tl.constexpr, TAIL: tl.constexpr,
                    CHUNK: tl.constexpr, BLOCK: tl.constexpr, EVICT: tl.constexpr,
                    STREAM: tl.constexpr, CG: tl.constexpr):
    """The split shape, with the next block's ids loaded before this block's rows."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    start, linear, todo = _extent(indptr, bs, num_rows, linear_min_ids)
    first = pid * BLOCK
    rows = first + tl.arange(0, BLOCK)
    ids = tl.load(indices + start + rows, mask=(rows < todo) & (linear == 0), other=0).to(tl.int64)
    while first < todo:
        rows = first + tl.arange(0, BLOCK)
        live = rows < todo
        here = tl.where(linear, rows.to(tl.int64), ids)
        nxt = rows + nprog * BLOCK
        ids = tl.load(indices + start + nxt, mask=(nxt < todo) & (linear == 0),
                      other=0).to(tl.int64)
        _convert(src, dst, here, live, num_rows, src_row_stride, dst_row_stride, HEAD, TAIL,
                 CHUNK, EVICT, STREAM, CG)
        first += nprog * BLOCK


def candidate_convert(spec: tuple[Any, ...], programs: int) -> Callable[..., None]:
    label, chunk, evict, stream, unroll, block, warps, _ = spec
    head, tail = kv_gather_cast.split_row(ROW)
    parts = label.split("+")
    if "prefetch" in parts or "cg" in parts:
        kernel, extra = prefetch_kernel, {"CG": "cg" in parts}
    else:
        kernel, extra = candidate_kernel, {"UNROLL": unroll}

    def convert(pool: torch.Tensor, out: torch.Tensor, indptr: torch.Tensor,
                indices: torch.Tensor) -> None:
        kernel[(programs,)](
            pool, out, indices, indptr, indptr.shape[0] - 1, pool.shape[0], pool.shape[0],
            pool.stride(0), out.stride(0), HEAD=head, TAIL=tail, CHUNK=chunk, BLOCK=block,
            EVICT=evict, STREAM=stream, num_warps=warps, **extra)

    return convert


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    device = torch.device("cuda")
    bandwidth = copy_bandwidth_gbps()
    print(f"{props.name}: {props.multi_processor_count} SMs, copy {bandwidth:.0f} GB/s", flush=True)
    pools = []
    for _ in range(LAYERS):
        raw = torch.empty((POOL_ROWS, 1, ROW), dtype=torch.uint8, device=device).random_(0, 256)
        raw[(raw & 0x7F) == 0x7F] = 0x7E
        pools.append(raw.view(torch.float8_e4m3fn))
    indptr = torch.zeros(2, dtype=torch.int32, device=device)
    indices = torch.zeros(POOL_ROWS, dtype=torch.int32, device=device)
    perms = {n: (torch.randperm(POOL_ROWS - 1, device=device)[:n].to(torch.int32) + 1)
             for n in ACTIVE}

    def set_active(n: int) -> None:
        indices.zero_()
        indices[:n].copy_(perms[n])
        indptr[1] = n

    shipped = kv_gather_cast.GatherCastWorkspace(POOL_ROWS, ROW, torch.bfloat16, device)
    out = shipped.buffer

    def time_step(convert: Callable[..., None], label: str) -> dict[str, Any]:
        def step() -> None:
            for p in pools:
                convert(p, out, indptr, indices)

        set_active(ACTIVE[0])
        graph = capture(step)
        entry: dict[str, Any] = {"step_ms": {}, "over_floor": {}, "bit_exact": {}}
        for n in ACTIVE:
            set_active(n)
            out.view(torch.int16).fill_(0x7FC1)
            ms = median_ms(graph.replay, args.reps)
            torch.cuda.synchronize()
            named = perms[n].long()
            entry["bit_exact"][str(n)] = bool(
                torch.equal(
                    out[named].view(torch.int16),
                    pools[-1][named].to(torch.bfloat16).view(torch.int16),
                )
            )
            floor_ms = n * READ_WRITE_BYTES / (bandwidth * 1e9) * 1e3 * LAYERS
            entry["step_ms"][str(n)] = ms
            entry["over_floor"][str(n)] = ms / floor_ms
        del graph
        print(label, json.dumps(entry), flush=True)
        return entry

    def shipped_convert(p: torch.Tensor, o: torch.Tensor, ip: torch.Tensor,
                        ix: torch.Tensor) -> None:
        shipped.convert(p, ip, ix)

    results = []
    base = time_step(shipped_convert, "shipped")
    results.append({"label": "shipped (opsctl/kernels/kv_gather_cast.py)",
                    "block_rows": shipped.block_rows, "num_warps": shipped.num_warps,
                    "programs": shipped.num_programs, **base})
    for spec in CANDIDATES:
        label, chunk, evict, stream, unroll, block, warps, per_sm = spec
        programs = props.multi_processor_count * per_sm
        entry = time_step(candidate_convert(spec, programs), f"{label} {block}/{warps}/{per_sm}")
        results.append({"label": label, "chunk": chunk, "evict_first_loads": evict,
                        "streaming_stores": stream, "unroll": unroll, "block_rows": block,
                        "num_warps": warps, "programs_per_sm": per_sm, "programs": programs,
                        **entry})
    # The shipped kernel once more at the end: the run's own drift, beside the first figure.
    again = time_step(shipped_convert, "shipped again")
    results.append({"label": "shipped, timed again last", **again})
    report = {
        "command": f"python3 bench/kv_gather_cast_tune.py --out bench/{args.out.name}",
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpu": props.name, "sm_count": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
        "triton": triton.__version__, "cuda": torch.version.cuda,
        "python": platform.python_version(), "pool_rows": POOL_ROWS, "row_elems": ROW,
        "layers": LAYERS,
        "index_pattern": "bs=1, N distinct uniformly random slots (as kv_gather_cast_bench.py)",
        "timing": f"CUDA-event median of {args.reps} graph replays of a 78-layer step "
                  "(one graph per candidate, captured at 2K, replayed at every size)",
        "floor": "N x (576 B read + 1152 B written) per layer / measured copy bandwidth",
        "copy_bandwidth_gbps": bandwidth,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
