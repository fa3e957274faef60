"""GPU proof of the speculative paths (issue 35): the kernel under real CUDA-graph capture and
replay on the buffers sglang's spec paths hand it (read from 0.5.23/0.5.15, docs/kv-gather-cast.md):

- draft decode: row i of the multi-step backend's (steps x max_bs+1) kv_indptr and (steps x width)
  kv_indices buffers, refilled in place out of the graph before each replay; attention (the torch
  MLA reference, one query per request: top-k 1) over our workspace equals attention over the
  stock full-pool cast, for both draft steps captured in one graph;
- target verify: the CUDA-graph wrapper's own (bs+1) indptr and index buffers, which each
  replay's plan refills by copy; the rows named (prefix + every draft token, shared prefixes,
  past the pool: the linear pass) are bit-exact, no other row is written.

    python3 -m pytest -m gpu tests/gpu/test_kernel_kv_gather_cast_spec_gpu.py -v
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is needed for the GPU kernel tests")
pytest.importorskip("triton", reason="triton is needed for the GPU kernel tests")

from test_kernel_kv_gather_cast_gpu import ROW, bits, fp8_pool, mla_decode_reference, queries  # noqa: E402

from opsctl.kernels import kv_gather_cast  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine"),
]

SENTINEL = 0x7FC1
STEPS, DRAFT_TOKENS = 3, 4


def slot_rows(lens: list[int], shared: int, extra: int, rows: int, gen: torch.Generator
              ) -> list[list[int]]:
    """req_to_token rows: a shared prefix, then own slots, `extra` more for the draft slots."""
    need = shared + sum(n - shared + extra for n in lens)
    free = (torch.randperm(rows - 1, generator=gen)[:need] + 1).tolist()
    prefix, at, out = free[:shared], shared, []
    for n in lens:
        own = n - shared + extra
        out.append(prefix + free[at: at + own])
        at += own
    return out


def fill_draft(req: list[list[int]], lens: list[int], kv_indptr: torch.Tensor,
               kv_indices: torch.Tensor) -> None:
    """What generate_draft_decode_kv_indices writes for top-k 1, built on the host and copied."""
    indptr = torch.zeros_like(kv_indptr, device="cpu")
    indices = torch.zeros_like(kv_indices, device="cpu")
    for i in range(STEPS):
        at = 0
        for b, n in enumerate(lens):
            ids = req[b][: n + i + 1]
            indices[i, at: at + len(ids)] = torch.tensor(ids, dtype=torch.int32)
            at += len(ids)
            indptr[i, b + 1] = at
    kv_indptr.copy_(indptr)
    kv_indices.copy_(indices)


def test_draft_decode_steps_in_one_graph_attend_as_stock() -> None:
    gen, cpu_gen = torch.Generator(device="cuda").manual_seed(5), torch.Generator().manual_seed(5)
    rows, bs, max_len = 65_536, 4, 8_192
    pool = fp8_pool(rows, gen)
    ws = kv_gather_cast.GatherCastWorkspace(rows, ROW, torch.bfloat16, torch.device("cuda"))
    kv_indptr = torch.zeros((STEPS, bs + 1), dtype=torch.int32, device="cuda")
    kv_indices = torch.zeros((STEPS, bs * max_len), dtype=torch.int32, device="cuda")
    q_nope, q_rope = (t.clone() for t in queries(bs, gen))
    positions = torch.arange(max_len, device="cuda")

    def step(i: int, ours: bool) -> torch.Tensor:
        rows_i = (kv_indptr[i], kv_indices[i])
        kbuf = kv_gather_cast.key_buffer_for_attention(
            ws if ours else None, pool, rows_i if ours else None, torch.bfloat16)
        return mla_decode_reference(q_nope, q_rope, kbuf, *rows_i, positions)

    lens = [5, 40, 300, 1]
    fill_draft(slot_rows(lens, 1, STEPS, rows, cpu_gen), lens, kv_indptr, kv_indices)
    graphs, outs = {}, {}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for ours in (True, False):
            for i in range(STEPS - 1):
                step(i, ours)  # warm-up (Triton compiles, cuBLAS picks its kernels)
            graphs[ours] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[ours]):
                outs[ours] = [step(i, ours) for i in range(STEPS - 1)]
    torch.cuda.current_stream().wait_stream(stream)
    for lens, shared in (([7_000, 12, 900, 3], 3), ([1, 1, 1, 1], 1), ([8_000] * 4, 7_990)):
        fill_draft(slot_rows(lens, shared, STEPS, rows, cpu_gen), lens, kv_indptr, kv_indices)
        graphs[True].replay()
        graphs[False].replay()
        torch.cuda.synchronize()
        for i in range(STEPS - 1):
            assert torch.equal(outs[True][i], outs[False][i]), (lens, i)
            assert torch.isfinite(outs[True][i]).all()


def test_verify_wrapper_buffers_refilled_by_copy_under_replay() -> None:
    gen, cpu_gen = torch.Generator(device="cuda").manual_seed(6), torch.Generator().manual_seed(6)
    rows, bs = 32_768, 3
    pool = fp8_pool(rows, gen)
    ws = kv_gather_cast.GatherCastWorkspace(rows, ROW, torch.bfloat16, torch.device("cuda"))
    indptr_buf = torch.zeros(bs + 1, dtype=torch.int32, device="cuda")
    indices_buf = torch.zeros(bs * 20_000, dtype=torch.int32, device="cuda")

    def plan(lens: list[int], shared: int) -> set[int]:
        req = slot_rows(lens, shared, DRAFT_TOKENS, rows, cpu_gen)
        full = [n + DRAFT_TOKENS for n in lens]
        ids = [s for b, n in enumerate(full) for s in req[b][:n]]
        indptr = torch.zeros(bs + 1, dtype=torch.int32)
        indptr[1:] = torch.tensor(full).cumsum(0)
        indptr_buf.copy_(indptr)  # what flashinfer's plan does with use_cuda_graph
        indices_buf[: len(ids)].copy_(torch.tensor(ids, dtype=torch.int32))
        return set(ids) if len(ids) < rows else set(range(rows))

    plan([10, 20, 30], 5)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        ws.convert(pool, indptr_buf, indices_buf)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ws.convert(pool, indptr_buf, indices_buf)
    torch.cuda.current_stream().wait_stream(stream)
    # the last case: three requests over one 16K shared prefix name more ids than the pool holds
    for lens, shared in (([100, 2_000, 7], 5), ([1, 1, 1], 1), ([16_000, 16_100, 16_200], 15_900)):
        expected = plan(lens, shared)
        ws.buffer.view(torch.int16).fill_(SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        hit = (bits(ws.buffer) != SENTINEL).any(dim=2).squeeze(1)
        assert set(torch.nonzero(hit).flatten().tolist()) == expected, lens
        sel = torch.tensor(sorted(expected), device="cuda")
        assert torch.equal(bits(ws.buffer[sel]), bits(pool[sel].to(torch.bfloat16))), lens
