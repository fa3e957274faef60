"""GPU proof of the gather-then-cast kernel: bit-exact against the stock full-pool cast.

MLA decode attention is a torch reference (flashinfer is not on the test machine) written with
fixed shapes so that it can be captured in a CUDA graph next to the kernel, as sglang captures
decode. Run on the accelerator machine:

    python3 -m pytest -m gpu tests/gpu/test_kernel_kv_gather_cast_gpu.py -v
"""

from __future__ import annotations

import logging

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


def indptr_of(lens: list[int]) -> torch.Tensor:
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32, device="cuda")
    if lens:
        indptr[1:] = torch.tensor(lens, device="cuda").cumsum(0).to(torch.int32)
    return indptr


def batch(lens: list[int], rows: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_indptr and distinct random slot ids (slot 0 is sglang's padding slot, never used)."""
    total = sum(lens)
    ids = torch.randperm(rows - 1, device="cuda", generator=gen)[:total].to(torch.int32) + 1
    return indptr_of(lens), ids


def shared_prefix_batch(
    prefix: int, suffixes: list[int], rows: int, gen: torch.Generator
) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """Requests that all start with the same `prefix` slots (a radix-cache hit), then own ones.

    Returns the lengths, kv_indptr and the ids: prefix x requests + sum(suffixes) of them, over
    only prefix + sum(suffixes) distinct slots.
    """
    slots = torch.randperm(rows - 1, device="cuda", generator=gen)[: prefix + sum(suffixes)] + 1
    shared, own = slots[:prefix], slots[prefix:].split(suffixes)
    ids = torch.cat([torch.cat([shared, mine]) for mine in own]).to(torch.int32)
    lens = [prefix + n for n in suffixes]
    return lens, indptr_of(lens), ids


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


@pytest.mark.parametrize("config", CONFIGS)
def test_ids_beyond_the_pool_convert_every_row_linearly(config: tuple[int, int, int]) -> None:
    gen = torch.Generator(device="cuda").manual_seed(4)
    rows = 100_003
    pool = fp8_pool(rows, gen)
    ws = make_workspace(rows, config)
    stock = bits(pool.to(torch.bfloat16))
    # 4x the pool in random slots with repetition, drawn from half of it: the other half is
    # never named by an id and is converted all the same.
    ws.buffer.view(torch.int16).fill_(0x7FC1)
    ids = torch.randint(0, rows // 2, (4 * rows,), device="cuda", generator=gen,
                        dtype=torch.int32)
    out = ws.convert(pool, indptr_of([rows, 2 * rows, rows]), ids)
    torch.cuda.synchronize()
    assert torch.equal(bits(out), stock)
    # Shared prefixes: 64 requests x (prefix + suffix) ids over far fewer distinct slots.
    ws.buffer.view(torch.int16).fill_(0x7FC1)
    lens, indptr, ids = shared_prefix_batch(4096, [64 + 3 * i for i in range(64)], rows, gen)
    assert sum(lens) >= rows
    assert torch.equal(bits(ws.convert(pool, indptr, ids)), stock)


def test_linear_starts_exactly_at_the_pool_row_count() -> None:
    gen = torch.Generator(device="cuda").manual_seed(5)
    rows = 100_003
    pool = fp8_pool(rows, gen)
    ws = make_workspace(rows, CONFIGS[0])
    same_slot = torch.full((rows,), 11, dtype=torch.int32, device="cuda")
    ws.buffer.view(torch.int16).fill_(0x7FC1)
    ws.convert(pool, indptr_of([rows - 1]), same_slot)
    torch.cuda.synchronize()
    touched = (bits(ws.buffer) != 0x7FC1).any(dim=2).squeeze(1)
    assert touched.nonzero().flatten().tolist() == [11]
    out = ws.convert(pool, indptr_of([rows]), same_slot)
    assert torch.equal(bits(out), bits(pool.to(torch.bfloat16)))


def test_new_workspace_is_zeroed_even_on_reused_memory() -> None:
    rows = 200_000
    # Leave a NaN pattern in the caching allocator's block: an empty() would hand it back.
    dirty = torch.empty((rows, 1, ROW), dtype=torch.bfloat16, device="cuda")
    dirty.view(torch.int16).fill_(0x7FC1)
    torch.cuda.synchronize()
    del dirty
    ws = make_workspace(rows, CONFIGS[0])
    assert int(bits(ws.buffer).count_nonzero()) == 0


class FakeKVPool:
    """What the backend hook reads from sglang's MLA token pool."""

    def __init__(self, key_buffer: torch.Tensor) -> None:
        self.key_buffer, self.start_layer, self.layer_num = key_buffer, 0, 78

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.key_buffer


def test_switch_and_dtype_decisions_on_the_device(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=kv_gather_cast.__name__)
    gen = torch.Generator(device="cuda").manual_seed(6)
    pool = fp8_pool(4096, gen)
    on = {kv_gather_cast.SWITCH_ENV: "1"}
    hook = kv_gather_cast.workspace_for_backend
    ws = hook(FakeKVPool(pool), torch.bfloat16, False, on)
    assert ws is not None and ws.buffer.is_cuda and ws.buffer.dtype == torch.bfloat16
    assert hook(FakeKVPool(pool), torch.bfloat16, False, {}) is None
    assert hook(FakeKVPool(pool.to(torch.bfloat16)), torch.bfloat16, False, on) is None
    assert hook(FakeKVPool(pool), torch.bfloat16, True, on) is None
    found = [kv_gather_cast.parse_marker(r.getMessage()) for r in caplog.records]
    states = [(m["state"], m.get("reason")) for m in found if m is not None]
    assert states == [("active", None), ("inactive", "switch_off"),
                      ("inactive", "pool_not_fp8_e4m3")]
    active = next(m for m in found if m is not None)
    assert active["workspace_bytes"] == ws.nbytes == kv_gather_cast.workspace_bytes(4096)
    assert active["programs"] == ws.num_programs == kv_gather_cast.default_num_programs(
        torch.device("cuda"))
    rows = (indptr_of([3]), torch.tensor([1, 2, 3], dtype=torch.int32, device="cuda"))
    assert kv_gather_cast.key_buffer_for_attention(ws, pool, rows, torch.bfloat16) is ws.buffer
    fp16 = kv_gather_cast.key_buffer_for_attention(ws, pool, rows, torch.float16)
    assert fp16.dtype == torch.float16 and torch.equal(fp16, pool.to(torch.float16))
    bf16_pool = pool.to(torch.bfloat16)
    same = kv_gather_cast.key_buffer_for_attention(ws, bf16_pool, rows, torch.bfloat16)
    assert same is not ws.buffer and torch.equal(bits(same), bits(bf16_pool))


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


class DecodeGraphs:
    """Two decode steps captured once, as sglang captures decode: attention over our workspace
    and over the stock cast, both reading capture-stable buffers (cuda_graph_kv_indptr /
    cuda_graph_kv_indices) that a replay rewrites in place."""

    def __init__(self, ws: kv_gather_cast.GatherCastWorkspace, pool: torch.Tensor,
                 capture_bs: int, max_len: int, max_ids: int, gen: torch.Generator) -> None:
        self.ws, self.pool, self.gen = ws, pool, gen
        self.indptr = torch.zeros(capture_bs + 1, dtype=torch.int32, device="cuda")
        self.indices = torch.zeros(max_ids, dtype=torch.int32, device="cuda")
        self.q_nope = torch.zeros(capture_bs, HEADS, NOPE, dtype=torch.bfloat16, device="cuda")
        self.q_rope = torch.zeros(capture_bs, HEADS, ROW - NOPE, dtype=torch.bfloat16,
                                  device="cuda")
        self.positions = torch.arange(max_len, device="cuda")
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[str, torch.Tensor] = {}

    def load(self, indptr: torch.Tensor, ids: torch.Tensor) -> None:
        self.indptr.copy_(indptr)
        self.indices.zero_()
        self.indices[: ids.numel()].copy_(ids)
        q_nope, q_rope = queries(self.indptr.numel() - 1, self.gen)
        self.q_nope.copy_(q_nope)
        self.q_rope.copy_(q_rope)

    def _attend(self, kbuf: torch.Tensor) -> torch.Tensor:
        return mla_decode_reference(self.q_nope, self.q_rope, kbuf, self.indptr, self.indices,
                                    self.positions)

    def ours(self) -> torch.Tensor:
        return self._attend(kv_gather_cast.key_buffer_for_attention(
            self.ws, self.pool, (self.indptr, self.indices), torch.bfloat16))

    def stock(self) -> torch.Tensor:
        return self._attend(
            kv_gather_cast.key_buffer_for_attention(None, self.pool, None, torch.bfloat16))

    def capture(self) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for name, fn in (("ours", self.ours), ("stock", self.stock)):
                fn()  # warm-up: Triton compiles, cuBLAS picks its kernels
                self.graphs[name] = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graphs[name]):
                    self.outputs[name] = fn()
        torch.cuda.current_stream().wait_stream(stream)

    def replay(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.graphs["ours"].replay()
        self.graphs["stock"].replay()
        torch.cuda.synchronize()
        return self.outputs["ours"].clone(), self.outputs["stock"].clone()


@pytest.mark.parametrize("config", CONFIGS[:2])
def test_graph_capture_then_replay_other_sizes(config: tuple[int, int, int]) -> None:
    gen = torch.Generator(device="cuda").manual_seed(3)
    rows, capture_bs, max_len = 65_536, 8, 16_384
    pool = fp8_pool(rows, gen)
    ws = make_workspace(rows, config)
    graphs = DecodeGraphs(ws, pool, capture_bs, max_len, rows, gen)
    graphs.load(*batch(_padded([3, 9], capture_bs), rows, gen))
    graphs.capture()

    cases = {
        "fewer requests, longer": _padded([2000, 7, 12_000], capture_bs),
        "empty batch": [0] * capture_bs,
        "full batch, other lengths": [1, 16_000, 3, 9000, 250, 1, 1, 4444],
        "pool near full": [8190] * 7 + [rows - 1 - 7 * 8190],
        "one token": _padded([1], capture_bs),
    }
    for label, lens in cases.items():
        assert max(lens) <= max_len and sum(lens) <= rows - 1, label
        graphs.load(*batch(lens, rows, gen))
        sentinel_rows = None
        if sum(lens) == 0:
            ws.buffer.view(torch.int16).fill_(0x7FC1)
            sentinel_rows = ws.buffer.clone()
        ours_out, stock_out = graphs.replay()
        assert torch.equal(ours_out, stock_out), label
        assert torch.equal(ours_out, graphs.ours()), label  # replay == eager on the same inputs
        if sentinel_rows is not None:
            assert torch.equal(bits(ws.buffer), bits(sentinel_rows)), "empty batch wrote rows"
        else:
            assert torch.isfinite(ours_out).all(), label


def test_graph_replay_crosses_from_gather_to_linear_and_back() -> None:
    """One captured graph, replayed below the pool (gather), past it (shared prefixes: linear)
    and below it again: attention equals stock every time, and each branch writes what it must."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    rows, capture_bs, max_len = 65_536, 8, 40_000
    pool = fp8_pool(rows, gen)
    ws = make_workspace(rows, CONFIGS[0])
    graphs = DecodeGraphs(ws, pool, capture_bs, max_len, capture_bs * max_len, gen)
    graphs.load(*batch(_padded([5, 17], capture_bs), rows, gen))
    graphs.capture()
    stock_rows = bits(pool.to(torch.bfloat16))

    def written() -> torch.Tensor:
        return (bits(ws.buffer) != 0x7FC1).any(dim=2).squeeze(1)

    for step in ("gather", "linear", "gather again", "linear again", "gather at the end"):
        ws.buffer.view(torch.int16).fill_(0x7FC1)
        if step.startswith("linear"):
            # 8 requests sharing a 32K-token prefix: 4.5x the pool in ids, 35K distinct slots.
            lens, indptr, ids = shared_prefix_batch(32_768, [100 * (i + 1) for i in range(8)],
                                                    rows, gen)
            assert sum(lens) >= rows and max(lens) <= max_len
        else:
            indptr, ids = batch(_padded([3000, 40, 20_000], capture_bs), rows, gen)
        graphs.load(indptr, ids)
        ours_out, stock_out = graphs.replay()
        assert torch.isfinite(ours_out).all(), step
        assert torch.equal(ours_out, stock_out), step
        if step.startswith("linear"):
            assert torch.equal(bits(ws.buffer), stock_rows), step
        else:
            expected = torch.zeros(rows, dtype=torch.bool, device="cuda")
            expected[ids.long()] = True
            assert torch.equal(written(), expected), step
