"""The gather-then-cast kernel's logic on CPU (Triton interpreter), bit-exact against torch.

The same Triton source runs compiled on the GPU (tests/gpu). NaN encodings are left out here:
the interpreter's FP8 conversion does not produce NaN for them (the GPU test covers NaN).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU build) is needed for the kernel tests")
pytest.importorskip("triton", reason="triton is needed for its CPU interpreter")

from opsctl.config import profiles  # noqa: E402
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


def all_rows_are_the_stock_cast(out: torch.Tensor, pool: torch.Tensor) -> bool:
    return torch.equal(out.view(torch.int16), pool.to(torch.bfloat16).view(torch.int16))


def test_ids_beyond_the_pool_convert_every_row_linearly() -> None:
    # Shared prefixes: 4x as many ids as rows, with repetition, never touching some rows.
    rows = 400
    pool = fp8_pool(rows, seed=11)
    ws = workspace(rows)
    gen = torch.Generator().manual_seed(12)
    ids = torch.randint(0, rows // 2, (4 * rows,), generator=gen, dtype=torch.int32)
    out = ws.convert(pool, indptr_of([rows, 2 * rows, rows]), ids)
    assert all_rows_are_the_stock_cast(out, pool)


def test_linear_from_exactly_the_pool_row_count() -> None:
    rows = 300
    pool = fp8_pool(rows, seed=13)
    same_slot = torch.full((rows,), 7, dtype=torch.int32)
    below = workspace(rows)
    below.convert(pool, indptr_of([rows - 1]), same_slot)
    expected = torch.zeros(rows, dtype=torch.bool)
    expected[7] = True
    assert torch.equal(written(below), expected)
    at = workspace(rows)
    assert all_rows_are_the_stock_cast(at.convert(pool, indptr_of([rows]), same_slot), pool)


def test_linear_count_is_read_from_the_indptr_range() -> None:
    # kv_indptr[0] != 0: the count is the difference, and linear ignores the ids themselves.
    rows = 200
    pool = fp8_pool(rows, seed=14)
    ws = workspace(rows)
    ids = torch.full((rows + 50,), -1, dtype=torch.int32)
    out = ws.convert(pool, torch.tensor([50, 120, rows + 50], dtype=torch.int32), ids)
    assert all_rows_are_the_stock_cast(out, pool)


def test_linear_threshold_is_a_workspace_setting() -> None:
    rows = 250
    pool = fp8_pool(rows, seed=15)
    ids = torch.tensor([3, 3, 9], dtype=torch.int32)
    early = kv_gather_cast.GatherCastWorkspace(rows, ROW, torch.bfloat16, "cpu", linear_min_ids=3)
    assert all_rows_are_the_stock_cast(early.convert(pool, indptr_of([3]), ids), pool)
    never = kv_gather_cast.GatherCastWorkspace(rows, ROW, torch.bfloat16, "cpu",
                                               linear_min_ids=10 * rows)
    never.buffer.view(torch.int16).fill_(SENTINEL)
    many = torch.randint(0, rows, (2 * rows,), generator=torch.Generator().manual_seed(16),
                         dtype=torch.int32)
    never.convert(pool, indptr_of([2 * rows]), many)
    expected = torch.zeros(rows, dtype=torch.bool)
    expected[many.long()] = True
    assert torch.equal(written(never), expected)


def test_new_workspace_is_zeroed() -> None:
    ws = kv_gather_cast.GatherCastWorkspace(64, ROW, torch.bfloat16, "cpu")
    assert torch.equal(ws.buffer.view(torch.int16), torch.zeros_like(ws.buffer.view(torch.int16)))
    assert ws.linear_min_ids == 64


def test_stock_reason_decides_every_case() -> None:
    pool = fp8_pool(30, seed=17)
    ws = workspace(30)
    rows = (indptr_of([2]), torch.tensor([1, 2], dtype=torch.int32))
    reason = kv_gather_cast.stock_reason
    assert reason(ws, pool, rows, torch.bfloat16) is None
    assert reason(None, pool, rows, torch.bfloat16) == kv_gather_cast.REASON_NO_WORKSPACE
    assert reason(ws, pool, None, torch.bfloat16) == kv_gather_cast.REASON_ROWS_UNKNOWN
    assert reason(ws, pool, rows, torch.float16) == kv_gather_cast.REASON_QUERY_DTYPE
    bf16_pool = pool.to(torch.bfloat16)
    assert reason(ws, bf16_pool, rows, torch.bfloat16) == kv_gather_cast.REASON_POOL_NOT_FP8
    # The same bytes as uint8 would convert as integers: not FP8, so stock.
    uint8_pool = pool.view(torch.uint8)
    assert reason(ws, uint8_pool, rows, torch.bfloat16) == kv_gather_cast.REASON_POOL_NOT_FP8
    assert (
        reason(ws, fp8_pool(31, seed=1), rows, torch.bfloat16) == kv_gather_cast.REASON_POOL_SHAPE
    )


@pytest.mark.parametrize("case", ["no workspace", "rows unknown", "query fp16", "bf16 pool",
                                  "other shape"])
def test_stock_path_is_the_plain_cast_and_writes_nothing(case: str) -> None:
    pool = fp8_pool(50, seed=8)
    ws = workspace(50)
    rows: tuple[torch.Tensor, torch.Tensor] | None = (indptr_of([3]),
                                                       torch.arange(3, dtype=torch.int32))
    chosen: kv_gather_cast.GatherCastWorkspace | None = ws
    dtype = torch.bfloat16
    if case == "no workspace":
        chosen = None
    elif case == "rows unknown":
        rows = None
    elif case == "query fp16":
        dtype = torch.float16
    elif case == "bf16 pool":
        pool = pool.to(torch.bfloat16)
    else:
        pool = fp8_pool(60, seed=8)
    out = kv_gather_cast.key_buffer_for_attention(chosen, pool, rows, dtype)
    assert out.dtype == dtype
    assert torch.equal(out.float(), pool.to(dtype).float())
    assert not written(ws).any()


def test_kernel_path_when_everything_fits() -> None:
    pool = fp8_pool(50, seed=18)
    ws = workspace(50)
    rows = (indptr_of([3]), torch.tensor([4, 9, 11], dtype=torch.int32))
    out = kv_gather_cast.key_buffer_for_attention(ws, pool, rows, torch.bfloat16)
    assert out is ws.buffer
    assert int(written(ws).sum()) == 3


def test_switch_reads_the_profile_env_name() -> None:
    assert kv_gather_cast.SWITCH_ENV == profiles.PATCH_SWITCH_ENV
    assert kv_gather_cast.switch_enabled({profiles.PATCH_SWITCH_ENV: "1"})
    for value in ("0", "", "true", "yes"):
        assert not kv_gather_cast.switch_enabled({profiles.PATCH_SWITCH_ENV: value})
    assert not kv_gather_cast.switch_enabled({})


def markers(caplog: pytest.LogCaptureFixture) -> list[dict[str, str | int]]:
    found = [kv_gather_cast.parse_marker(r.getMessage()) for r in caplog.records]
    return [m for m in found if m is not None]


class FakeKVPool:
    """The two attributes and the one method of sglang's MLA token pool the hook uses."""

    def __init__(self, key_buffer: torch.Tensor | None, layer_num: int = 78) -> None:
        self.key_buffer = key_buffer
        self.start_layer = 3
        self.layer_num = layer_num
        self.asked: list[int] = []

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        self.asked.append(layer_id)
        if self.key_buffer is None:
            raise AssertionError("the pool must not be touched")
        return self.key_buffer


ON = {kv_gather_cast.SWITCH_ENV: "1"}


def test_backend_hook_switched_on_logs_active_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=kv_gather_cast.__name__)
    kv_pool = FakeKVPool(fp8_pool(40, seed=9))
    made = kv_gather_cast.workspace_for_backend(kv_pool, torch.bfloat16, False, ON)
    assert made is not None and kv_pool.asked == [3]
    assert made.buffer.shape == (40, 1, ROW) and made.buffer.dtype == torch.bfloat16
    assert made.nbytes == kv_gather_cast.workspace_bytes(40)
    assert markers(caplog) == [{
        "state": "active", "workspace_bytes": made.nbytes, "rows": 40, "row_elems": ROW,
        "layers": 78, "dtype": "torch.bfloat16", "device": "cpu",
        "programs": kv_gather_cast.INTERPRETER_PROGRAMS,
    }]


def test_backend_hook_switched_off_logs_inactive_without_touching_the_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=kv_gather_cast.__name__)
    kv_pool = FakeKVPool(None)
    assert kv_gather_cast.workspace_for_backend(kv_pool, torch.bfloat16, False, {}) is None
    assert kv_pool.asked == []
    assert markers(caplog) == [{"state": "inactive", "reason": "switch_off",
                                "switch": kv_gather_cast.SWITCH_ENV}]


def test_draft_backends_get_nothing_and_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=kv_gather_cast.__name__)
    kv_pool = FakeKVPool(None)
    assert kv_gather_cast.workspace_for_backend(kv_pool, torch.bfloat16, True, ON) is None
    assert kv_pool.asked == [] and markers(caplog) == []


@pytest.mark.parametrize(("make_pool", "reason"), [
    (lambda p: p.to(torch.bfloat16), "pool_not_fp8_e4m3"),  # BF16 KV: no cast needed
    (lambda p: p.view(torch.uint8), "pool_not_fp8_e4m3"),
    (lambda p: p.view(10, 4, ROW), "pool_shape"),
])
def test_backend_hook_keeps_stock_for_other_pools(
    caplog: pytest.LogCaptureFixture, make_pool: Callable[[torch.Tensor], torch.Tensor], reason: str
) -> None:
    caplog.set_level(logging.INFO, logger=kv_gather_cast.__name__)
    kv_pool = FakeKVPool(make_pool(fp8_pool(40, seed=9)))
    assert kv_gather_cast.workspace_for_backend(kv_pool, torch.bfloat16, False, ON) is None
    [marker] = markers(caplog)
    assert marker["state"] == "inactive" and marker["reason"] == reason


def test_fp8_query_dtype_keeps_stock(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=kv_gather_cast.__name__)
    pool = fp8_pool(20, seed=2)
    assert kv_gather_cast.create_workspace(pool, pool.dtype) is None
    assert markers(caplog)[0]["reason"] == kv_gather_cast.REASON_QUERY_DTYPE


def test_marker_round_trip_and_log_prefixes() -> None:
    line = kv_gather_cast.format_marker("active", workspace_bytes=570_877_056, rows=495_553,
                                        layers=78, device="cuda:0", shape=(1, 2))
    assert line.startswith(kv_gather_cast.MARKER + " active ")
    prefixed = f"[2026-12-01 10:00:00 TP3] {line}\n"
    assert kv_gather_cast.parse_marker(prefixed) == {
        "state": "active", "workspace_bytes": 570_877_056, "rows": 495_553, "layers": 78,
        "device": "cuda:0", "shape": "(1,2)",
    }
    assert kv_gather_cast.parse_marker(f"{kv_gather_cast.MARKER} inactive n=\u00b2 m=-3") == {
        "state": "inactive", "n": "\u00b2", "m": "-3"}
    assert kv_gather_cast.parse_marker("no marker here") is None
    assert kv_gather_cast.parse_marker(f"{kv_gather_cast.MARKER} maybe reason=x") is None
    assert kv_gather_cast.parse_marker(kv_gather_cast.MARKER) is None
    assert kv_gather_cast.parse_marker(f"{kv_gather_cast.MARKER} inactive reason=switch_off junk") \
        == {"state": "inactive", "reason": "switch_off"}


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
