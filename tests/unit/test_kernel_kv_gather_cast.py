"""The gather-then-cast kernel's logic on CPU (Triton interpreter), bit-exact against torch.

The same Triton source runs compiled on the GPU (tests/gpu). NaN encodings are left out here:
the interpreter's FP8 conversion does not produce NaN for them (the GPU test covers NaN).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU build) is needed for the kernel tests")
pytest.importorskip("triton", reason="triton is needed for its CPU interpreter")

from opsctl.deploy import profiles  # noqa: E402
from opsctl.kernels import kv_gather_cast  # noqa: E402
from opsctl.kernels.seed_gather_cast import seed_gather_cast, seed_plan_indices  # noqa: E402

ROW = 576
SENTINEL = 0x7FC1  # a NaN bit pattern that no cast produces


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def fp8_pool(rows: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (rows, 1, ROW), dtype=torch.uint8, generator=gen)
    raw[(raw & 0x7F) == 0x7F] = 0x7E
    return raw.view(torch.float8_e4m3fn)


def workspace(rows: int) -> kv_gather_cast.GatherCastWorkspace:
    ws = kv_gather_cast.GatherCastWorkspace(rows, ROW, torch.bfloat16, "cpu")
    ws.buffer.view(torch.int16).fill_(SENTINEL)
    return ws


def indptr_of(lens: list[int]) -> torch.Tensor:
    out = torch.zeros(len(lens) + 1, dtype=torch.int32)
    if lens:
        out[1:] = torch.tensor(lens).cumsum(0)
    return out


def written(ws: kv_gather_cast.GatherCastWorkspace) -> torch.Tensor:
    return (ws.buffer.view(torch.int16) != SENTINEL).any(dim=2).squeeze(1)


# The last case has far more rows than programs x BLOCK_ROWS: the grid-stride loop iterates.
@pytest.mark.parametrize("lens", [[1], [7, 0, 30], [200, 150, 1, 249]])
def test_active_rows_bit_exact_and_only_they_are_written(lens: list[int]) -> None:
    rows = 2_000
    pool = fp8_pool(rows, seed=len(lens))
    ws = workspace(rows)
    ids = (torch.randperm(rows - 1, generator=torch.Generator().manual_seed(7))[: sum(lens)] + 1)
    ids = ids.to(torch.int32)
    out = ws.convert(pool, indptr_of(lens), ids)
    sel = ids.long()
    assert torch.equal(out[sel].view(torch.int16), pool[sel].to(torch.bfloat16).view(torch.int16))
    expected = torch.zeros(rows, dtype=torch.bool)
    expected[sel] = True
    assert torch.equal(written(ws), expected)


def test_only_the_indptr_range_is_converted() -> None:
    rows = 500
    pool = fp8_pool(rows, seed=3)
    ws = workspace(rows)
    ids = torch.arange(100, 200, dtype=torch.int32)
    # kv_indptr[0] need not be 0, and ids past kv_indptr[bs] (a stale tail) are never read.
    indptr = torch.tensor([10, 40, 60], dtype=torch.int32)
    ws.convert(pool, indptr, ids)
    expected = torch.zeros(rows, dtype=torch.bool)
    expected[ids[10:60].long()] = True
    assert torch.equal(written(ws), expected)


def test_empty_batch_writes_nothing() -> None:
    rows = 300
    ws = workspace(rows)
    pool = fp8_pool(rows, seed=4)
    ws.convert(pool, indptr_of([0, 0, 0]), torch.arange(rows, dtype=torch.int32))
    ws.convert(pool, indptr_of([]), torch.arange(rows, dtype=torch.int32))
    assert not written(ws).any()


def test_out_of_pool_slot_ids_are_skipped() -> None:
    rows = 300
    pool = fp8_pool(rows, seed=5)
    ws = workspace(rows)
    ids = torch.tensor([5, -1, rows, rows + 7, 6], dtype=torch.int32)
    ws.convert(pool, indptr_of([5]), ids)
    expected = torch.zeros(rows, dtype=torch.bool)
    expected[[5, 6]] = True
    assert torch.equal(written(ws), expected)


def test_pool_full_every_row() -> None:
    rows = 700
    pool = fp8_pool(rows, seed=6)
    ws = workspace(rows)
    out = ws.convert(pool, indptr_of([rows]), torch.arange(rows, dtype=torch.int32))
    assert torch.equal(out.view(torch.int16), pool.to(torch.bfloat16).view(torch.int16))


def test_shape_mismatch_is_refused() -> None:
    ws = workspace(10)
    with pytest.raises(ValueError, match="pool shape"):
        ws.convert(fp8_pool(11, seed=1), indptr_of([1]), torch.zeros(1, dtype=torch.int32))


def test_stock_path_when_off_or_rows_unknown() -> None:
    pool = fp8_pool(50, seed=8)
    ws = workspace(50)
    stock = pool.to(torch.bfloat16)
    for chosen, rows in ((None, (indptr_of([3]), torch.arange(3, dtype=torch.int32))), (ws, None)):
        out = kv_gather_cast.key_buffer_for_attention(chosen, pool, rows, torch.bfloat16)
        assert torch.equal(out.view(torch.int16), stock.view(torch.int16))
    assert not written(ws).any()


def test_switch_reads_the_profile_env_name() -> None:
    assert kv_gather_cast.SWITCH_ENV == profiles.PATCH_SWITCH_ENV
    assert kv_gather_cast.switch_enabled({profiles.PATCH_SWITCH_ENV: "1"})
    for value in ("0", "", "true", "yes"):
        assert not kv_gather_cast.switch_enabled({profiles.PATCH_SWITCH_ENV: value})
    assert not kv_gather_cast.switch_enabled({})


def test_workspace_only_when_switched_on_for_an_fp8_pool() -> None:
    pool = fp8_pool(40, seed=9)
    on = {kv_gather_cast.SWITCH_ENV: "1"}
    made = kv_gather_cast.maybe_create_workspace(pool, torch.bfloat16, on)
    assert made is not None
    assert made.buffer.shape == pool.shape and made.buffer.dtype == torch.bfloat16
    assert made.nbytes == kv_gather_cast.workspace_bytes(40)
    assert kv_gather_cast.maybe_create_workspace(pool, torch.bfloat16, {}) is None
    bf16_pool = pool.to(torch.bfloat16)
    assert kv_gather_cast.maybe_create_workspace(bf16_pool, torch.bfloat16, on) is None


def test_workspace_bytes_for_the_seed_pool() -> None:
    # sglang's pool tensor has size + page_size rows; the seed ran 495,552 tokens, page 1.
    assert kv_gather_cast.workspace_bytes(495_552 + 1) == 570_877_056
    assert kv_gather_cast.workspace_bytes(10, row_elems=576, out_itemsize=2) == 11_520


def test_row_split() -> None:
    assert kv_gather_cast.split_row(576) == (512, 64)
    assert kv_gather_cast.split_row(512) == (512, 0)
    with pytest.raises(ValueError):
        kv_gather_cast.split_row(656)


def test_seed_reference_matches_stock_rows() -> None:
    pool = fp8_pool(400, seed=10)
    ids = torch.randperm(400, generator=torch.Generator().manual_seed(1))[:123].to(torch.int32)
    compact = seed_gather_cast(pool, ids, 100, torch.bfloat16)
    stock = pool.to(torch.bfloat16)[ids[:100].long()]
    assert torch.equal(compact.view(torch.int16), stock.view(torch.int16))
    assert torch.equal(seed_plan_indices(100, "cpu"), torch.arange(100, dtype=torch.int32))
