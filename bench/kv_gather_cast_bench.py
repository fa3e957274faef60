"""Benchmark: stock full-pool cast vs the seed's torch gather-then-cast vs opsctl's kernel.

The seed's pool (495,552 tokens x 576 FP8 per layer, 78 distinct layer pools), active tokens
from 100 to the whole pool, every variant under CUDA-graph replay of a 78-layer step. Ours is
captured ONCE and replayed at every size (the active count is written on the device only); the
seed's design cannot survive that, so its graph is re-captured per size (and timed eagerly too,
as it really ran). Floor = bytes the gather-then-cast must move / measured device copy bandwidth.

Shared prefixes (`shared_rows`): id counts up to 4x the pool, where ours converts the whole pool
linearly; timed in the same captured graph, beside stock and beside the kernel with the linear
branch disabled (gather only: what the kernel did before it was bounded).

    python3 bench/kv_gather_cast_bench.py --out bench/results/kv_gather_cast_bound_h200.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opsctl.kernels import kv_gather_cast  # noqa: E402
from opsctl.kernels.seed_gather_cast import seed_gather_cast, seed_plan_indices  # noqa: E402

POOL_ROWS = 495_552
ROW = 576
LAYERS = 78
HEADS_PER_GPU = 8  # GLM-5: 64 heads at TP8; the prep cost does not depend on it
ACTIVE = [100, 2_048, 8_192, 32_768, 131_072, 262_144, POOL_ROWS - 1]
SWEEP_ACTIVE = [2_048, 131_072, POOL_ROWS - 1, 4 * POOL_ROWS]
PREFIX, SUFFIX = 16_384, 256
# (label, kind, size): "random" = size ids drawn uniformly with repetition; "prefix" = size
# requests that share one PREFIX-token prefix, each with SUFFIX tokens of its own.
SHARED = [
    ("random slots with repetition, 1x pool", "random", POOL_ROWS),
    ("random slots with repetition, 4x pool", "random", 4 * POOL_ROWS),
    (f"16 requests x ({PREFIX:,} shared + {SUFFIX} own)", "prefix", 16),
    (f"64 requests x ({PREFIX:,} shared + {SUFFIX} own)", "prefix", 64),
]
MAX_IDS = 4 * POOL_ROWS
GATHER_ONLY = 2**31 - 1  # a linear_min_ids no count reaches
# (block_rows, num_warps, programs_per_sm)
SWEEP = [(16, 4, 16), (16, 4, 8), (16, 4, 24), (32, 4, 16), (8, 4, 32), (32, 8, 4)]
READ_WRITE_BYTES = ROW + 2 * ROW  # one FP8 row read, one BF16 row written


def median_ms(fn: Callable[[], None], reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth_gbps() -> float:
    n = 4 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 256)
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    ms = median_ms(copy, reps=10)
    return 2 * n / (ms * 1e-3) / 1e9


def capture(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return graph


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
        raw[(raw & 0x7F) == 0x7F] = 0x7E  # no NaN encodings
        pools.append(raw.view(torch.float8_e4m3fn))
    indptr = torch.zeros(2, dtype=torch.int32, device=device)  # bs = 1: [0, N]
    indices = torch.zeros(MAX_IDS, dtype=torch.int32, device=device)

    def load(ids: torch.Tensor) -> None:
        # The kernel reads only kv_indptr[0] and kv_indptr[bs]: one request of N ids stands for
        # any batch of N ids in all.
        indices.zero_()
        indices[: ids.numel()].copy_(ids)
        indptr[1] = ids.numel()

    def set_active(n: int) -> None:
        # Distinct random slots (slot 0 is the padding slot): the worst case for locality; past
        # the pool (the sweep's linear case) random slots with repetition.
        if n > POOL_ROWS - 1:
            load(torch.randint(1, POOL_ROWS, (n,), device=device, dtype=torch.int32))
        else:
            load(torch.randperm(POOL_ROWS - 1, device=device)[:n].to(torch.int32) + 1)

    def shared_ids(kind: str, size: int) -> torch.Tensor:
        if kind == "random":
            return torch.randint(1, POOL_ROWS, (size,), device=device, dtype=torch.int32)
        slots = torch.randperm(POOL_ROWS - 1, device=device)[: PREFIX + size * SUFFIX] + 1
        own = slots[PREFIX:].view(size, SUFFIX)
        return torch.cat([slots[:PREFIX].expand(size, PREFIX), own], dim=1).flatten().to(
            torch.int32)

    def make_ws(block: int, warps: int, per_sm: int,
                linear_min_ids: int | None = None) -> kv_gather_cast.GatherCastWorkspace:
        return kv_gather_cast.GatherCastWorkspace(
            POOL_ROWS, ROW, torch.bfloat16, device,
            num_programs=kv_gather_cast.default_num_programs(device, per_sm),
            block_rows=block, num_warps=warps, linear_min_ids=linear_min_ids)

    def ours_graph(ws: kv_gather_cast.GatherCastWorkspace) -> torch.cuda.CUDAGraph:
        def step() -> None:
            for p in pools:
                ws.convert(p, indptr, indices)

        set_active(ACTIVE[0])  # captured once, at the smallest size
        return capture(step)

    def stock_step() -> None:
        for p in pools:
            p.to(torch.bfloat16)  # what forward_decode does; freed at once, as there

    sweep = []
    best = None
    for block, warps, per_sm in SWEEP:
        ws = make_ws(block, warps, per_sm)
        graph = ours_graph(ws)
        entry = {"block_rows": block, "num_warps": warps, "programs_per_sm": per_sm,
                 "step_ms": {}}
        for n in SWEEP_ACTIVE:
            set_active(n)
            entry["step_ms"][str(n)] = median_ms(graph.replay, args.reps)
        entry["total_ms"] = sum(entry["step_ms"].values())
        print("sweep", entry, flush=True)
        sweep.append(entry)
        if best is None or entry["total_ms"] < best["total_ms"]:
            best = entry
        del graph, ws
        torch.cuda.empty_cache()

    assert best is not None
    # The rows time what the image ships (the file's defaults), whatever the sweep found best.
    shipped = (kv_gather_cast.BLOCK_ROWS, kv_gather_cast.NUM_WARPS,
               kv_gather_cast.PROGRAMS_PER_SM)
    ws = make_ws(*shipped)
    ours = ours_graph(ws)
    stock = capture(stock_step)

    rows = []
    for n in ACTIVE:
        set_active(n)
        ours_ms = median_ms(ours.replay, args.reps)
        torch.cuda.synchronize()
        last = indices[:n].long()
        exact = bool(torch.equal(ws.buffer[last].view(torch.int16),
                                 pools[-1][last].to(torch.bfloat16).view(torch.int16)))
        stock_ms = median_ms(stock.replay, max(5, args.reps // 2))

        def seed_step(n: int = n) -> None:
            seed_plan_indices(n, device)
            for p in pools:
                seed_gather_cast(p, indices, n, torch.bfloat16)

        seed = capture(seed_step)
        seed_ms = median_ms(seed.replay, args.reps)
        del seed
        seed_eager_ms = median_ms(seed_step, max(5, args.reps // 2))
        torch.cuda.empty_cache()
        floor_layer_ms = n * READ_WRITE_BYTES / (bandwidth * 1e9) * 1e3
        stock_floor_layer_ms = POOL_ROWS * READ_WRITE_BYTES / (bandwidth * 1e9) * 1e3
        row = {
            "active_tokens": n,
            "stock_step_ms": stock_ms,
            "seed_graph_step_ms": seed_ms,
            "seed_eager_step_ms": seed_eager_ms,
            "ours_step_ms": ours_ms,
            "stock_layer_us": stock_ms / LAYERS * 1e3,
            "seed_graph_layer_us": seed_ms / LAYERS * 1e3,
            "ours_layer_us": ours_ms / LAYERS * 1e3,
            "floor_layer_us": floor_layer_ms * 1e3,
            "floor_step_ms": floor_layer_ms * LAYERS,
            "stock_floor_step_ms": stock_floor_layer_ms * LAYERS,
            "ours_over_floor": ours_ms / (floor_layer_ms * LAYERS),
            "ours_rows_bit_exact": exact,
        }
        print(json.dumps(row), flush=True)
        rows.append(row)

    gather_ws = make_ws(*shipped, linear_min_ids=GATHER_ONLY)
    gather_only = ours_graph(gather_ws)
    stock_floor_step_ms = POOL_ROWS * READ_WRITE_BYTES / (bandwidth * 1e9) * 1e3 * LAYERS
    shared_rows = []
    for label, kind, size in SHARED:
        ids = shared_ids(kind, size)
        load(ids)
        n = ids.numel()
        ws.buffer.view(torch.int16).fill_(0x7FC1)  # a NaN no cast produces: stale rows show
        ours_ms = median_ms(ours.replay, args.reps)
        torch.cuda.synchronize()
        linear = n >= ws.linear_min_ids
        if linear:  # every row of the last layer's pool, not only the named ones
            exact = bool(torch.equal(ws.buffer.view(torch.int16),
                                     pools[-1].to(torch.bfloat16).view(torch.int16)))
        else:
            named = ids.long()
            exact = bool(torch.equal(ws.buffer[named].view(torch.int16),
                                     pools[-1][named].to(torch.bfloat16).view(torch.int16)))
        gather_ms = median_ms(gather_only.replay, args.reps)
        stock_ms = median_ms(stock.replay, max(5, args.reps // 2))
        row = {
            "case": label,
            "ids": n,
            "ids_over_pool": n / POOL_ROWS,
            "distinct_rows": int(torch.unique(ids).numel()),
            "ours_branch": "linear" if linear else "gather",
            "stock_step_ms": stock_ms,
            "ours_step_ms": ours_ms,
            "gather_only_step_ms": gather_ms,
            "stock_layer_us": stock_ms / LAYERS * 1e3,
            "ours_layer_us": ours_ms / LAYERS * 1e3,
            "gather_only_layer_us": gather_ms / LAYERS * 1e3,
            "stock_floor_step_ms": stock_floor_step_ms,
            "ours_rows_bit_exact": exact,
        }
        print(json.dumps(row), flush=True)
        shared_rows.append(row)

    targets = {
        "ours_layer_us_le_8_up_to_2k": all(r["ours_layer_us"] <= 8.0 for r in rows
                                           if r["active_tokens"] <= 2_048),
        "ours_le_1.3x_floor_from_128k": all(r["ours_over_floor"] <= 1.3 for r in rows
                                            if r["active_tokens"] >= 131_072),
        "ours_never_slower_than_stock": all(r["ours_step_ms"] <= r["stock_step_ms"] for r in rows),
        "ours_step_under_1ms_at_8k": all(r["ours_step_ms"] < 1.0 for r in rows
                                         if r["active_tokens"] == 8_192),
        "all_rows_bit_exact": all(r["ours_rows_bit_exact"] for r in rows),
        "ours_never_slower_than_stock_shared_prefix": all(
            r["ours_step_ms"] <= r["stock_step_ms"] for r in shared_rows),
        "shared_prefix_rows_bit_exact": all(r["ours_rows_bit_exact"] for r in shared_rows),
    }
    report = {
        "command": f"python3 bench/kv_gather_cast_bench.py --out bench/{args.out.name}"
                   + ("" if args.reps == 20 else f" --reps {args.reps}"),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "pool_rows": POOL_ROWS,
        "row_elems": ROW,
        "layers": LAYERS,
        "heads_per_gpu": HEADS_PER_GPU,
        "index_pattern": "bs=1, N distinct uniformly random slots (worst case for locality)",
        "timing": f"CUDA-event median of {args.reps} graph replays after 3 warm-ups "
                  "(stock and seed-eager: half as many); per layer = step / 78",
        "copy_bandwidth_gbps": bandwidth,
        "workspace_bytes": ws.nbytes,
        "kernel_config": dict(zip(("block_rows", "num_warps", "programs_per_sm"), shipped,
                                  strict=True)),
        "sweep_best_config": {k: best[k] for k in ("block_rows", "num_warps", "programs_per_sm")},
        "sweep": sweep,
        "rows": rows,
        "shared_index_pattern": "one captured graph for all cases; linear_min_ids = pool rows "
                                "(ours) or never (gather only); bit-exact checked on the last "
                                "layer: every row when linear, the named rows when gathering",
        "shared_rows": shared_rows,
        "targets": targets,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("targets", json.dumps(targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
