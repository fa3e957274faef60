"""The gather-then-cast kernel on speculative-decoding batch shapes (Triton interpreter, CPU).

The index layouts are the ones sglang builds for MTP/EAGLE with top-k 1 (read from 0.5.23):
- draft decode: per step i, a row of the multi-step backend's `kv_indptr` (steps x max_bs+1)
  and of its `kv_indices` buffer (steps x width); request b reads its prefix and i+1 draft slots
  (kernels/ops/speculative/cache_locs.py generate_draft_decode_kv_indices);
- target verify: request b reads its prefix and all draft tokens (seq_len + num_draft_tokens,
  speculative/eagle_info.py generate_attn_arg_prefill);
- draft extend: request b reads its prefix and its accepted tokens (the plain planned rows).
Requests share a prefix when the radix cache hit it: the same slot ids in several rows.
Under CUDA graphs the same buffers are refilled in place at every replay; `refill` stands for
that, and the kernel is called again with the tensors it was first given.
"""

from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU build) is needed for the kernel tests")
pytest.importorskip("triton", reason="triton is needed for its CPU interpreter")

from test_kernel_kv_gather_cast import ROW, SENTINEL, fp8_pool  # noqa: E402  (one pool maker)

from opsctl.kernels import kv_gather_cast  # noqa: E402

POOL_ROWS = 3_000


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def fresh(ws: kv_gather_cast.GatherCastWorkspace) -> None:
    ws.buffer.view(torch.int16).fill_(SENTINEL)


def written(ws: kv_gather_cast.GatherCastWorkspace) -> set[int]:
    hit = (ws.buffer.view(torch.int16) != SENTINEL).any(dim=2).squeeze(1)
    return set(torch.nonzero(hit).flatten().tolist())


def assert_bit_exact(ws: kv_gather_cast.GatherCastWorkspace, pool: torch.Tensor,
                     ids: set[int]) -> None:
    sel = torch.tensor(sorted(ids), dtype=torch.long)
    assert torch.equal(ws.buffer[sel].view(torch.int16),
                       pool[sel].to(torch.bfloat16).view(torch.int16))


class Requests:
    """Slot ids per request (req_to_token rows): a shared prefix, own tokens, draft slots."""

    def __init__(self, seq_lens: list[int], shared_prefix: int, draft_slots: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        free = (torch.randperm(POOL_ROWS - 1, generator=gen) + 1).tolist()  # slot 0: padding
        prefix = [free.pop() for _ in range(shared_prefix)]
        self.seq_lens = seq_lens
        self.rows = [prefix + [free.pop() for _ in range(n - shared_prefix + draft_slots)]
                     for n in seq_lens]


def draft_decode_buffers(reqs: Requests, steps: int, width: int, max_bs: int
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The multi-step backend's (kv_indptr, kv_indices) buffers, as its index kernel fills them
    for top-k 1: step i, request b: kv_indices[i][kv_indptr[i][b]:] = prefix + i+1 draft slots."""
    kv_indptr = torch.zeros((steps, max_bs + 1), dtype=torch.int32)
    kv_indices = torch.zeros((steps, width), dtype=torch.int32)
    fill_draft_decode(reqs, kv_indptr, kv_indices)
    return kv_indptr, kv_indices


def fill_draft_decode(reqs: Requests, kv_indptr: torch.Tensor, kv_indices: torch.Tensor) -> None:
    for i in range(kv_indptr.shape[0]):
        at = 0
        for b, n in enumerate(reqs.seq_lens):
            ids = reqs.rows[b][: n + i + 1]
            kv_indices[i, at: at + len(ids)] = torch.tensor(ids, dtype=torch.int32)
            at += len(ids)
            kv_indptr[i, b + 1] = at


def verify_rows(reqs: Requests, draft_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """generate_attn_arg_prefill's (cum_kv_seq_len, kv_indices): prefix + every draft token."""
    lens = [n + draft_tokens for n in reqs.seq_lens]
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32)
    indptr[1:] = torch.tensor(lens).cumsum(0)
    ids = [i for b, n in enumerate(lens) for i in reqs.rows[b][:n]]
    return indptr, torch.tensor(ids, dtype=torch.int32)


def workspace() -> kv_gather_cast.GatherCastWorkspace:
    ws = kv_gather_cast.GatherCastWorkspace(POOL_ROWS, ROW, torch.bfloat16, "cpu")
    fresh(ws)
    return ws


@pytest.mark.parametrize("shared_prefix", [0, 40])
def test_draft_decode_each_step_converts_its_prefix_and_its_draft_slots(shared_prefix: int) -> None:
    steps, max_bs = 3, 8
    reqs = Requests([57, 130, 41], shared_prefix, draft_slots=steps, seed=shared_prefix)
    kv_indptr, kv_indices = draft_decode_buffers(reqs, steps, width=max_bs * 200, max_bs=max_bs)
    pool, ws = fp8_pool(POOL_ROWS, seed=1), workspace()
    bs = len(reqs.seq_lens)
    for i in range(steps - 1):  # the multi-step backend has steps - 1 draft-decode backends
        fresh(ws)
        ws.convert(pool, kv_indptr[i, : bs + 1], kv_indices[i])
        expected = {s for b, n in enumerate(reqs.seq_lens) for s in reqs.rows[b][: n + i + 1]}
        assert written(ws) == expected  # the next step's draft slot is not among them
        assert_bit_exact(ws, pool, expected)


def test_verify_converts_prefix_and_every_draft_token_shared_prefix_once() -> None:
    reqs = Requests([200, 33, 90, 1], shared_prefix=1, draft_slots=4, seed=3)
    reqs_shared = Requests([300, 300, 300, 300], shared_prefix=290, draft_slots=4, seed=4)
    pool = fp8_pool(POOL_ROWS, seed=2)
    for r in (reqs, reqs_shared):
        ws = workspace()
        indptr, ids = verify_rows(r, draft_tokens=4)
        ws.convert(pool, indptr, ids)
        expected = set(ids.tolist())
        assert written(ws) == expected
        assert_bit_exact(ws, pool, expected)
    # 4 x (290 shared + 10 own + 4 draft) ids name 290 + 4 x 14 distinct rows
    assert len(expected) == 290 + 4 * 14


def test_verify_ids_past_the_pool_take_the_linear_pass() -> None:
    """Many verify requests over one long shared prefix: ids >= pool rows convert every row."""
    reqs = Requests([2_000] * 3, shared_prefix=1_990, draft_slots=4, seed=5)
    pool = fp8_pool(POOL_ROWS, seed=6)
    ws = workspace()
    indptr, ids = verify_rows(reqs, draft_tokens=4)
    assert ids.numel() >= POOL_ROWS
    ws.convert(pool, indptr, ids)
    assert written(ws) == set(range(POOL_ROWS))
    assert_bit_exact(ws, pool, set(range(POOL_ROWS)))


def test_graph_replay_of_draft_decode_reads_the_refilled_buffers() -> None:
    """One capture's tensors (a row view of each buffer), replayed after in-place refills at
    other lengths and other requests: each replay converts exactly that step's rows."""
    steps, max_bs, bs = 3, 4, 2
    reqs = Requests([10, 12], 0, draft_slots=steps, seed=7)
    kv_indptr, kv_indices = draft_decode_buffers(reqs, steps, width=max_bs * 2_000, max_bs=max_bs)
    captured = (kv_indptr[1, : bs + 1], kv_indices[1][: int(kv_indptr[1, bs])])
    pool, ws = fp8_pool(POOL_ROWS, seed=8), workspace()
    for seed, lens in ((9, [700, 3]), (10, [1, 1]), (11, [1_500, 1_400])):
        later = Requests(lens, 0, draft_slots=steps, seed=seed)
        fill_draft_decode(later, kv_indptr, kv_indices)  # in place, as every replay does
        fresh(ws)
        ws.convert(pool, *captured)
        expected = {s for b, n in enumerate(lens) for s in later.rows[b][: n + 2]}
        assert written(ws) == expected
        assert_bit_exact(ws, pool, expected)


def test_graph_replay_of_verify_reads_the_wrapper_buffers() -> None:
    """The verify graph's rows are the CUDA-graph wrapper's own buffers (`graph_rows`); each
    replay's plan copies the step's rows into them, and the captured launch converts those."""
    max_bs, bs, width = 4, 3, 20_000
    wrapper = CudaGraphWrapper(torch.zeros(max_bs + 1, dtype=torch.int32)[: bs + 1],
                               torch.zeros(width, dtype=torch.int32))
    captured = kv_gather_cast.graph_rows(wrapper)
    assert captured is not None
    pool, ws = fp8_pool(POOL_ROWS, seed=12), workspace()
    for seed, lens in ((13, [5, 80, 9]), (14, [300, 300, 300]), (15, [1, 1, 1])):
        reqs = Requests(lens, shared_prefix=1, draft_slots=4, seed=seed)
        indptr, ids = verify_rows(reqs, draft_tokens=4)
        wrapper.plan(indptr, ids)  # flashinfer's plan in graph mode: copies in place
        fresh(ws)
        ws.convert(pool, *captured)
        assert written(ws) == set(ids.tolist())
        assert_bit_exact(ws, pool, set(ids.tolist()))


class CudaGraphWrapper:
    """What `graph_rows` reads of flashinfer's BatchMLAPagedAttentionWrapper(use_cuda_graph=True):
    the buffers given at construction, refilled in place by plan (0.6.12 mla/_core.py:843-847)."""

    def __init__(self, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                 use_cuda_graph: bool = True) -> None:
        self._use_cuda_graph = use_cuda_graph
        self._kv_indptr_buf = kv_indptr
        self._kv_indices_buf = kv_indices

    def plan(self, kv_indptr: torch.Tensor, kv_indices: torch.Tensor) -> None:
        self._kv_indptr_buf.copy_(kv_indptr)
        self._kv_indices_buf[: len(kv_indices)].copy_(kv_indices)


def test_graph_rows_only_from_a_cuda_graph_wrapper() -> None:
    indptr, indices = torch.zeros(3, dtype=torch.int32), torch.zeros(9, dtype=torch.int32)
    rows = kv_gather_cast.graph_rows(CudaGraphWrapper(indptr, indices))
    assert rows is not None and rows[0] is indptr and rows[1] is indices
    assert kv_gather_cast.graph_rows(CudaGraphWrapper(indptr, indices, False)) is None
    assert kv_gather_cast.graph_rows(CudaGraphWrapper(None, indices)) is None  # type: ignore[arg-type]
    assert kv_gather_cast.graph_rows(object()) is None


def test_rows_for_forward_keeps_unstable_rows_out_of_a_capture() -> None:
    rows = (torch.zeros(2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32))
    assert kv_gather_cast.rows_for_forward(rows, graph_safe=False, capturing=False) is rows
    assert kv_gather_cast.rows_for_forward(rows, graph_safe=True, capturing=False) is rows
    assert kv_gather_cast.rows_for_forward(rows, graph_safe=True, capturing=True) is rows
    assert kv_gather_cast.rows_for_forward(rows, graph_safe=False, capturing=True) is None
    assert kv_gather_cast.rows_for_forward(None, graph_safe=True, capturing=True) is None


# --- one workspace per KV pool --------------------------------------------------------------------


class FakeKVPool:
    """The attributes and the one method of sglang's MLA token pool the hook uses."""

    def __init__(self, key_buffer: torch.Tensor | None, layer_num: int) -> None:
        self.key_buffer = key_buffer
        self.start_layer = 0
        self.layer_num = layer_num
        self.asked = 0

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        self.asked += 1
        if self.key_buffer is None:
            raise AssertionError("the pool must not be touched")
        return self.key_buffer


ON = {kv_gather_cast.SWITCH_ENV: "1"}


def markers(caplog: pytest.LogCaptureFixture) -> list[dict[str, str | int]]:
    found = [kv_gather_cast.parse_marker(r.getMessage()) for r in caplog.records]
    return [m for m in found if m is not None]


def test_every_backend_over_a_pool_shares_one_workspace_and_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=kv_gather_cast.__name__)
    target, draft = FakeKVPool(fp8_pool(30, 1), 78), FakeKVPool(fp8_pool(30, 2), 1)
    t = kv_gather_cast.workspace_for_pool(target, torch.bfloat16, False, ON)
    # the draft model: two draft-decode steps and the draft-extend backend
    d = [kv_gather_cast.workspace_for_pool(draft, torch.bfloat16, True, ON) for _ in range(3)]
    assert t is not None and d[0] is not None and d[0] is not t
    assert d[1] is d[0] and d[2] is d[0]
    assert kv_gather_cast.workspace_for_pool(target, torch.bfloat16, False, ON) is t
    assert target.asked == 1 and draft.asked == 1
    lines = markers(caplog)
    assert [(m["state"], m["role"], m["layers"]) for m in lines] == [
        ("active", "target", 78), ("active", "draft", 1)]
    assert lines[1]["workspace_bytes"] == kv_gather_cast.workspace_bytes(30)


def test_switched_off_pool_is_decided_once_without_touching_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=kv_gather_cast.__name__)
    draft = FakeKVPool(None, 1)
    for _ in range(3):
        assert kv_gather_cast.workspace_for_pool(draft, torch.bfloat16, True, {}) is None
    assert draft.asked == 0
    assert markers(caplog) == [{"state": "inactive", "reason": "switch_off",
                                "switch": kv_gather_cast.SWITCH_ENV, "role": "draft"}]


def test_a_bf16_draft_pool_keeps_stock_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=kv_gather_cast.__name__)
    draft = FakeKVPool(fp8_pool(30, 3).to(torch.bfloat16), 1)
    assert kv_gather_cast.workspace_for_pool(draft, torch.bfloat16, True, ON) is None
    assert kv_gather_cast.workspace_for_pool(draft, torch.bfloat16, True, ON) is None
    [line] = markers(caplog)
    assert line["state"] == "inactive" and line["reason"] == "pool_not_fp8_e4m3"
    assert line["role"] == "draft"
