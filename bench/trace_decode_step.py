"""Real torch-profiler traces of a decode step, stock full-pool cast vs gather-then-cast.

A stand-in for one GPU's share of GLM-5's MLA decode (TP8 shapes: 8 heads, 576-wide latent KV
rows in an FP8 e4m3 pool, hidden 6144), LAYERS layers per step. Per layer:

  norm -> fused_qkv_a GEMM -> q_b GEMM -> absorbed-q bmm -> KV write (bf16 -> fp8 into the pool)
  -> key buffer: stock `pool.to(bf16)` (the whole pool) or opsctl's gather-then-cast kernel
  -> attention over the active rows (gather, two bmm, softmax) -> v absorb bmm -> o_proj GEMM
  -> router GEMM + top-k -> MoE stand-in (8 experts' up/down bmm, SiLU) + shared expert GEMMs

then the LM head and a greedy argmax whose `.tolist()` is the step's host sync, as a server's
output step is. Each variant is captured once as a CUDA graph (as sglang captures decode) and
profiled for STEPS replays, each inside a `step[DECODE bs=N]` record_function range (the span
sglang 0.5.23 emits), with torch.profiler(CPU + CUDA, with_stack=True) started and stopped
around them as sglang's /start_profile does; the same step is also profiled eagerly (no graph,
record_shapes=True) for the host-op view. Every trace is exported with export_chrome_trace,
shrunk by opsctl.trace.chrome.shrink and gzipped. Sizes are chosen so the run is short and the
stock cast still dominates: POOL_ROWS rows per layer (the seed's pool is 495,552 x 78 layers).

    python3 bench/trace_decode_step.py --out "$OUT"           # on the H200 (bench/run_trace_gpu.sh)
    python3 bench/trace_decode_step.py --out /tmp/t --device cpu --layers 2 --pool-rows 4096
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opsctl.trace import chrome  # noqa: E402

ROW, NOPE, ROPE = 576, 512, 64
HEADS = 8  # GLM-5: 64 heads / TP8
HIDDEN, Q_LORA, QK_NOPE, V_HEAD = 6144, 1536, 192, 256
EXPERTS_PER_TOKEN, EXPERT_INTER = 8, 256  # 8 routed experts; 2048 intermediate / TP8
ROUTED, VOCAB_SHARD = 256, 19_360  # 256 experts; 154,880 vocab / 8
BS, ACTIVE_PER_REQ = 8, 1024
LAYERS, POOL_ROWS, STEPS = 16, 131_072, 5
SM_SCALE = 0.0625


def fp8_pool(rows: int, device: torch.device) -> torch.Tensor:
    raw = torch.randint(0, 256, (rows, 1, ROW), dtype=torch.uint8, device=device)
    raw[(raw & 0x7F) == 0x7F] = 0x7E  # no NaN encodings
    return raw.view(torch.float8_e4m3fn)


def weight(*shape: int, device: torch.device) -> torch.Tensor:
    return (torch.randn(*shape, device=device) * 0.02).to(torch.bfloat16)


class DecodeStack:
    """Fixed-shape decode step over static buffers, so one graph capture replays any step."""

    def __init__(self, layers: int, pool_rows: int, device: torch.device, gathercast: bool):
        self.device, self.layers = device, layers
        self.pools = [fp8_pool(pool_rows, device) for _ in range(layers)]
        w = weight
        self.w = [{
            "qkv_a": w(HIDDEN, Q_LORA + ROW, device=device),
            "q_b": w(Q_LORA, HEADS * (QK_NOPE + ROPE), device=device),
            "w_kc": w(HEADS, QK_NOPE, NOPE, device=device),
            "w_vc": w(HEADS, NOPE, V_HEAD, device=device),
            "o": w(HEADS * V_HEAD, HIDDEN, device=device),
            "router": w(HIDDEN, ROUTED, device=device),
            "up": w(EXPERTS_PER_TOKEN, HIDDEN, 2 * EXPERT_INTER, device=device),
            "down": w(EXPERTS_PER_TOKEN, EXPERT_INTER, HIDDEN, device=device),
            "shared_up": w(HIDDEN, 2 * EXPERT_INTER, device=device),
            "shared_down": w(EXPERT_INTER, HIDDEN, device=device),
        } for _ in range(layers)]
        self.lm_head = w(HIDDEN, VOCAB_SHARD, device=device)
        self.embed = w(VOCAB_SHARD, HIDDEN, device=device)
        # Static inputs, rewritten in place between replays (sglang's cuda_graph_* buffers).
        total = BS * ACTIVE_PER_REQ
        self.tokens = torch.zeros(BS, dtype=torch.long, device=device)
        self.kv_indptr = torch.arange(0, total + 1, ACTIVE_PER_REQ, dtype=torch.int32,
                                      device=device)
        self.kv_indices = (torch.randperm(pool_rows - 1, device=device)[:total] + 1).to(torch.int32)
        self.write_slots = self.kv_indices.view(BS, ACTIVE_PER_REQ)[:, -1].long().contiguous()
        self.gathercast, self.workspace = gathercast, None
        if gathercast and device.type == "cuda":
            from opsctl.kernels.kv_gather_cast import GatherCastWorkspace

            self.workspace = GatherCastWorkspace(pool_rows, ROW, torch.bfloat16, device)
        elif gathercast:  # a CPU dry run of the shapes: the same rows, through torch
            self.cpu_rows = torch.zeros(pool_rows, 1, ROW, dtype=torch.bfloat16)

    def key_buffer(self, pool: torch.Tensor) -> torch.Tensor:
        if not self.gathercast:
            return pool.to(torch.bfloat16)  # stock flashinfer MLA decode: the whole pool
        if self.workspace is not None:
            return self.workspace.convert(pool, self.kv_indptr, self.kv_indices)
        ids = self.kv_indices.long()
        return self.cpu_rows.index_copy_(0, ids, pool.index_select(0, ids).to(torch.bfloat16))

    def layer(self, x: torch.Tensor, i: int) -> torch.Tensor:
        w, pool = self.w[i], self.pools[i]
        h = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)
        qkv = h @ w["qkv_a"]
        q = (qkv[:, :Q_LORA] @ w["q_b"]).view(BS, HEADS, QK_NOPE + ROPE)
        q_abs = torch.bmm(q[..., :QK_NOPE].transpose(0, 1), w["w_kc"]).transpose(0, 1)
        q_full = torch.cat([q_abs, q[..., QK_NOPE:]], dim=-1)  # (bs, heads, 576)
        # The KV write as sglang stores FP8: cast, then a byte view (index ops lack fp8 kernels).
        new_kv = qkv[:, Q_LORA:].to(pool.dtype).view(torch.uint8)
        pool.view(torch.uint8).view(-1, ROW).index_copy_(0, self.write_slots, new_kv)
        kbuf = self.key_buffer(pool).view(-1, ROW)
        k = kbuf.index_select(0, self.kv_indices.long()).view(BS, ACTIVE_PER_REQ, ROW)
        scores = torch.bmm(q_full, k.transpose(1, 2)) * SM_SCALE
        probs = torch.softmax(scores.float(), dim=-1).to(torch.bfloat16)
        latent = torch.bmm(probs, k[..., :NOPE])  # (bs, heads, 512)
        attn = torch.bmm(latent.transpose(0, 1), w["w_vc"]).transpose(0, 1).reshape(BS, -1)
        x = x + attn @ w["o"]
        gate = torch.topk(torch.softmax((x @ w["router"]).float(), -1), EXPERTS_PER_TOKEN)
        up = torch.bmm(x.expand(EXPERTS_PER_TOKEN, BS, HIDDEN), w["up"])
        act = torch.nn.functional.silu(up[..., :EXPERT_INTER]) * up[..., EXPERT_INTER:]
        routed = torch.bmm(act, w["down"])  # (experts, bs, hidden)
        weights = gate.values.to(torch.bfloat16).t().unsqueeze(-1)
        shared_up = x @ w["shared_up"]
        shared = (torch.nn.functional.silu(shared_up[:, :EXPERT_INTER])
                  * shared_up[:, EXPERT_INTER:]) @ w["shared_down"]
        return x + (routed * weights).sum(0) + shared

    def forward(self) -> torch.Tensor:
        x = self.embed.index_select(0, self.tokens)
        for i in range(self.layers):
            x = self.layer(x, i)
        return torch.argmax((x @ self.lm_head).float(), dim=-1)


def capture(fn: Callable[[], torch.Tensor]) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up: Triton compiles, cuBLAS picks its kernels
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return graph, out


def step_ms(run: Callable[[], object], reps: int) -> float:
    """CUDA-event median of `reps` steps after 3 warm-ups."""
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def profile(run: Callable[[], list[int]], stack: DecodeStack, steps: int, shapes: bool,
            raw_path: Path) -> None:
    """sglang's way: profiler started, N forwards each in a step span, stopped, exported."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if stack.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(activities=activities, with_stack=True, record_shapes=shapes)
    prof.start()
    for _ in range(steps):
        with torch.profiler.record_function(f"step[DECODE bs={BS}]"):
            next_tokens = run()
        stack.tokens.copy_(torch.tensor(next_tokens, device=stack.device) % VOCAB_SHARD)
    prof.stop()
    prof.export_chrome_trace(str(raw_path))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--pool-rows", type=int, default=POOL_ROWS)
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    torch.manual_seed(0)
    on_gpu = device.type == "cuda"
    summary: dict[str, object] = {
        "command": "python3 bench/trace_decode_step.py --out $OUT",
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": torch.cuda.get_device_name(device) if on_gpu else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "layers": args.layers, "pool_rows": args.pool_rows, "row_elems": ROW, "bs": BS,
        "active_tokens_per_request": ACTIVE_PER_REQ, "steps_profiled": args.steps,
        "pool_bytes_per_layer": args.pool_rows * ROW, "traces": {},
    }
    if on_gpu:
        import triton

        summary["triton"] = triton.__version__
    results: dict[str, dict[str, object]] = {}
    outputs = {}
    for variant in ("stock", "gathercast"):
        stack = DecodeStack(args.layers, args.pool_rows, device, variant == "gathercast")
        modes: list[tuple[str, Callable[[], list[int]], bool]] = []
        if on_gpu:
            graph, out = capture(stack.forward)

            def replay(graph: torch.cuda.CUDAGraph = graph, out: torch.Tensor = out) -> list[int]:
                graph.replay()
                return out.tolist()  # the host sync of a server's output step

            stack.tokens.zero_()
            outputs[variant] = replay()
            results[variant] = {"graph_step_ms": step_ms(graph.replay, 20),
                                "eager_step_ms": step_ms(stack.forward, 5)}
            modes.append(("graph", replay, False))
        modes.append(("eager", lambda stack=stack: stack.forward().tolist(), True))
        for mode, run, shapes in modes:
            for _ in range(2):
                run()
            raw = args.out / f"raw-{variant}-{mode}.json"
            profile(run, stack, args.steps, shapes, raw)
            meta = {"variant": variant, "mode": mode, "layers": args.layers,
                    "pool_rows": args.pool_rows, "bs": BS, "source": "bench/trace_decode_step.py"}
            doc = chrome.shrink(json.loads(raw.read_text()), meta)
            name = f"h200-decode-{variant}-{mode}.trace.json.gz" if on_gpu else \
                f"cpu-decode-{variant}-{mode}.trace.json.gz"
            path = chrome.write_gz(doc, args.out / name)
            raw.unlink()
            summary["traces"][name] = {"bytes": path.stat().st_size,  # type: ignore[index]
                                       "events": len(doc["traceEvents"])}
            print(f"{name}: {path.stat().st_size} bytes, {len(doc['traceEvents'])} events",
                  flush=True)
        del stack
        if on_gpu:
            torch.cuda.empty_cache()
    if outputs:
        summary["same_tokens_stock_vs_gathercast"] = outputs["stock"] == outputs["gathercast"]
    summary["timings_ms"] = results
    try:  # the analyzer's own verdicts, as the committed fixtures' test will check them
        from opsctl.trace import analyze, signatures

        verdicts = {}
        for name in summary["traces"]:  # type: ignore[attr-defined]
            found = analyze.analyze(chrome.load(args.out / name))
            verdicts[name] = [f.signature for f in signatures.judge(found)]
            print(name, found.step_rule, found.steps, verdicts[name],
                  f"step {found.step_ms:.3f} ms busy {found.gpu_busy_ms:.3f} ms", flush=True)
            for row in found.kernels[:6]:
                print(f"  {row.kind:11} {row.name[:60]:60} x{row.count:g} {row.ms:.3f} ms "
                      f"{row.share:.1%}", flush=True)
        summary["verdicts"] = verdicts
    except Exception as exc:  # noqa: BLE001 - the traces matter more than the check
        summary["verdicts_error"] = f"{type(exc).__name__}: {exc}"
    (args.out / "trace_decode_step.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["timings_ms"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
