"""GPU proof of the gather-then-cast kernel: bit-exact against the stock full-pool cast.

MLA decode attention is a torch reference (flashinfer is not on the test machine) written with
fixed shapes so that it can be captured in a CUDA graph next to the kernel, as sglang captures
decode. Run on the accelerator machine:

    python3 -m pytest -m gpu tests/gpu/test_kernel_kv_gather_cast_gpu.py -v
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the GPU kernel tests")
pytest.importorskip("triton", reason="triton is needed for the GPU kernel tests")

from opsctl.kernels import kv_gather_cast  # noqa: E402
from opsctl.kernels.seed_gather_cast import seed_gather_cast, seed_plan_indices  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]

ROW = 576
NOPE = 512
HEADS = 8  # GLM-5: 64 attention heads / TP8
SM_SCALE = 0.0625
# (block_rows, num_warps, programs_per_sm): the default and two others the benchmark sweeps.
CONFIGS = [
    (kv_gather_cast.BLOCK_ROWS, kv_gather_cast.NUM_WARPS, kv_gather_cast.PROGRAMS_PER_SM),
    (32, 8, 4),
    (8, 4, 16),
]


def fp8_pool(rows: int, gen: torch.Generator) -> torch.Tensor:
    """Random e4m3 bytes, every encoding but NaN (0x7f/0xff): subnormals and signed zeros too."""
    raw = torch.randint(0, 256, (rows, 1, ROW), dtype=torch.uint8, device="cuda", generator=gen)
    raw[(raw & 0x7F) == 0x7F] = 0x7E
    return raw.view(torch.float8_e4m3fn)


def make_workspace(rows: int, config: tuple[int, int, int]) -> kv_gather_cast.GatherCastWorkspace:
    block, warps, per_sm = config
    device = torch.device("cuda")
    return kv_gather_cast.GatherCastWorkspace(
        rows, ROW, torch.bfloat16, device,
        num_programs=kv_gather_cast.default_num_programs(device, per_sm),
        block_rows=block, num_warps=warps,
    )


def batch(lens: list[int], rows: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_indptr and distinct random slot ids (slot 0 is sglang's padding slot, never used)."""
    total = sum(lens)
    ids = torch.randperm(rows - 1, device="cuda", generator=gen)[:total].to(torch.int32) + 1
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32, device="cuda")
    if lens:
        indptr[1:] = torch.tensor(lens, device="cuda").cumsum(0).to(torch.int32)
    return indptr, ids


def mla_decode_reference(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    kbuf: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Absorbed-MLA decode over paged rows of `kbuf`; fixed shapes (graph-capturable).

    `positions` is a constant arange(max_len) made once: no arange per step.
    """
    lens = (kv_indptr[1:] - kv_indptr[:-1]).long()
    valid = positions[None, :] < lens[:, None]
    slot = (kv_indptr[:-1, None].long() + positions[None, :]).clamp(max=kv_indices.numel() - 1)
    ids = torch.where(valid, kv_indices[slot].long(), torch.zeros_like(slot))
    k = kbuf[ids, 0].float()
    k = torch.where(valid[..., None], k, torch.zeros_like(k))
    ckv, kpe = k[..., :NOPE], k[..., NOPE:]
    scores = torch.einsum("bhd,bld->bhl", q_nope.float(), ckv)
    scores = (scores + torch.einsum("bhd,bld->bhl", q_rope.float(), kpe)) * SM_SCALE
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return torch.einsum("bhl,bld->bhd", probs, ckv)


def queries(bs: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.randn(bs, HEADS, ROW, device="cuda", generator=gen).to(torch.bfloat16)
    return q[..., :NOPE].contiguous(), q[..., NOPE:].contiguous()


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16)


@pytest.mark.parametrize("config", CONFIGS)
def test_rows_bit_exact_and_nothing_else_written(config: tuple[int, int, int]) -> None:
    gen = torch.Generator(device="cuda").manual_seed(1)
    rows = 100_003
    pool = fp8_pool(rows, gen)
    ws = make_workspace(rows, config)
    for lens in ([1], [5, 0, 77], [4096, 3, 10_000, 1], [rows - 1]):
        ws.buffer.view(torch.int16).fill_(0x7FC1)  # a NaN no cast produces
        indptr, ids = batch(lens, rows, gen)
        out = ws.convert(pool, indptr, ids)
        torch.cuda.synchronize()
        sel = ids.long()
        assert torch.equal(bits(out[sel]), bits(pool[sel].to(torch.bfloat16)))
        untouched = torch.ones(rows, dtype=torch.bool, device="cuda")
        untouched[sel] = False
        assert bool((bits(out[untouched]) == 0x7FC1).all())


def test_nan_maps_to_nan() -> None:
    raw = torch.tensor([0x7F, 0xFF, 0x00, 0x80], dtype=torch.uint8, device="cuda")
    pool = raw.repeat_interleave(ROW).view(4, 1, ROW).view(torch.float8_e4m3fn)
    ws = make_workspace(4, CONFIGS[0])
    indptr = torch.tensor([0, 4], dtype=torch.int32, device="cuda")
    ids = torch.arange(4, dtype=torch.int32, device="cuda")
    out = ws.convert(pool, indptr, ids).float()
    ref = pool.to(torch.bfloat16).float()
    assert torch.equal(torch.isnan(out), torch.isnan(ref))


def test_attention_eager_bit_exact_stock_seed_ours() -> None:
    gen = torch.Generator(device="cuda").manual_seed(2)
    rows = 65_536
    pool = fp8_pool(rows, gen)
    ws = make_workspace(rows, CONFIGS[0])
    lens = [1, 700, 5000, 33]
    indptr, ids = batch(lens, rows, gen)
    q_nope, q_rope = queries(len(lens), gen)
    positions = torch.arange(max(lens), device="cuda")
    stock = mla_decode_reference(q_nope, q_rope, pool.to(torch.bfloat16), indptr, ids, positions)
    ours = mla_decode_reference(q_nope, q_rope, ws.convert(pool, indptr, ids), indptr, ids,
                                positions)
    n = int(indptr[-1])
    compact = seed_gather_cast(pool, ids, n, torch.bfloat16)
    seed = mla_decode_reference(q_nope, q_rope, compact, indptr, seed_plan_indices(n, "cuda"),
                                positions)
    assert torch.isfinite(stock).all()
    assert torch.equal(ours, stock)
    assert torch.equal(seed, stock)


def _padded(lens: list[int], capture_bs: int) -> list[int]:
    # sglang pads a replay batch to the captured size with one-token requests.
    return lens + [1] * (capture_bs - len(lens))


@pytest.mark.parametrize("config", CONFIGS[:2])
def test_graph_capture_then_replay_other_sizes(config: tuple[int, int, int]) -> None:
    gen = torch.Generator(device="cuda").manual_seed(3)
    rows, capture_bs, max_len = 65_536, 8, 16_384
    pool = fp8_pool(rows, gen)
    ws = make_workspace(rows, config)
    ws.buffer.zero_()
    # Capture-stable buffers, as sglang's cuda_graph_kv_indptr / cuda_graph_kv_indices.
    indptr_buf = torch.zeros(capture_bs + 1, dtype=torch.int32, device="cuda")
    indices_buf = torch.zeros(rows, dtype=torch.int32, device="cuda")
    q_nope_buf = torch.zeros(capture_bs, HEADS, NOPE, dtype=torch.bfloat16, device="cuda")
    q_rope_buf = torch.zeros(capture_bs, HEADS, ROW - NOPE, dtype=torch.bfloat16, device="cuda")
    positions = torch.arange(max_len, device="cuda")

    def load(lens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        indptr, ids = batch(lens, rows, gen)
        indptr_buf.copy_(indptr)
        indices_buf.zero_()
        indices_buf[: ids.numel()].copy_(ids)
        q_nope, q_rope = queries(capture_bs, gen)
        q_nope_buf.copy_(q_nope)
        q_rope_buf.copy_(q_rope)
        return indptr, ids

    def ours() -> torch.Tensor:
        kbuf = kv_gather_cast.key_buffer_for_attention(
            ws, pool, (indptr_buf, indices_buf), torch.bfloat16)
        return mla_decode_reference(q_nope_buf, q_rope_buf, kbuf, indptr_buf, indices_buf,
                                    positions)

    def stock() -> torch.Tensor:
        kbuf = kv_gather_cast.key_buffer_for_attention(None, pool, None, torch.bfloat16)
        return mla_decode_reference(q_nope_buf, q_rope_buf, kbuf, indptr_buf, indices_buf,
                                    positions)

    load(_padded([3, 9], capture_bs))
    graphs = {}
    outputs = {}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for name, fn in (("ours", ours), ("stock", stock)):
            fn()  # warm-up: Triton compiles, cuBLAS picks its kernels
            graphs[name] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[name]):
                outputs[name] = fn()
    torch.cuda.current_stream().wait_stream(stream)

    cases = {
        "fewer requests, longer": _padded([2000, 7, 12_000], capture_bs),
        "empty batch": [0] * capture_bs,
        "full batch, other lengths": [1, 16_000, 3, 9000, 250, 1, 1, 4444],
        "pool near full": [8190] * 7 + [rows - 1 - 7 * 8190],
        "one token": _padded([1], capture_bs),
    }
    for label, lens in cases.items():
        assert max(lens) <= max_len and sum(lens) <= rows - 1, label
        load(lens)
        sentinel_rows = None
        if sum(lens) == 0:
            ws.buffer.view(torch.int16).fill_(0x7FC1)
            sentinel_rows = ws.buffer.clone()
        graphs["ours"].replay()
        graphs["stock"].replay()
        torch.cuda.synchronize()
        ours_out, stock_out = outputs["ours"].clone(), outputs["stock"].clone()
        assert torch.equal(ours_out, stock_out), label
        assert torch.equal(ours_out, ours()), label  # replay == eager on the same inputs
        if sentinel_rows is not None:
            assert torch.equal(bits(ws.buffer), bits(sentinel_rows)), "empty batch wrote rows"
        else:
            assert torch.isfinite(ours_out).all(), label
