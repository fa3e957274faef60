"""Graph-safe gather-then-cast of the active FP8 MLA KV rows into a persistent BF16 workspace.

This one file is both the module the tests import and the file the patch set installs into the
image (as `sglang/srt/layers/attention/opsctl_kv_gather_cast.py`), so it imports nothing from
opsctl and imports torch/triton only inside functions.

Why this shape (a one-layer BF16 workspace written at the physical slot ids, shared by all
layers): flashinfer's plan, its index buffer and sglang's decode CUDA graphs stay exactly as
stock. Attention reads `workspace[kv_indices[j]]` where stock reads `pool.to(bf16)[kv_indices[j]]`;
the kernel writes precisely those rows, bit-identically (every e4m3 value is exact in bf16), so
the rows attention reads are the same bits. The alternative (a compact buffer planned once with
identity indices) would need a second capture-stable index buffer and changes to the graph
wrapper set-up, and it only works with page_size 1.

Bounded cost: the gather's work grows with the id count (the sum of sequence lengths), not with
the distinct rows, and with shared prefixes the ids can outnumber the pool. When the count read on
the device reaches the pool's row count, the same launch converts the whole pool linearly
(consecutive rows, no index reads): never more work than the stock full cast, and the same bits.

Graph safety: the active-row count is read on the device (`kv_indptr[bs] - kv_indptr[0]`), the
choice between gather and linear is made there too, the grid is fixed when the workspace is made
(a grid-stride loop covers any count), and a step does no host sync, no allocation and no
`arange`. The price is one pool-sized BF16 buffer per GPU: `workspace_bytes(rows)`, logged at
start-up (the `MARKER` line) and budgeted in the profile's memory fraction.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Must equal opsctl.deploy.profiles.PATCH_SWITCH_ENV (a unit test holds them together).
SWITCH_ENV = "OPSCTL_KV_GATHER_CAST"
# Prefix of the one start-up log line that says whether the patched path is on; `opsctl verify`
# finds it in the container log (`parse_marker`). Lines: "<MARKER> active key=value ..." or
# "<MARKER> inactive reason=<REASON_*> ...".
MARKER = "opsctl-kv-gather-cast:"
ACTIVE, INACTIVE = "active", "inactive"
REASON_SWITCH_OFF = "switch_off"
REASON_POOL_NOT_FP8 = "pool_not_fp8_e4m3"
REASON_POOL_SHAPE = "pool_shape"
# Which model a pool's workspace serves (the `role` field of the marker line): the target model,
# or the speculative draft model (MTP/EAGLE), whose own KV pool gets its own workspace.
ROLE_TARGET, ROLE_DRAFT = "target", "draft"
# Where `workspace_for_pool` keeps a pool's workspace (or its absence): on the pool object itself,
# so every backend over that pool shares one buffer and one marker line, for the pool's lifetime.
POOL_ATTR = "_opsctl_gathercast_workspace"
# Per-forward reasons for the stock cast (`stock_reason`); not logged, they can change per step.
REASON_NO_WORKSPACE = "no_workspace"
REASON_ROWS_UNKNOWN = "rows_unknown"
REASON_QUERY_DTYPE = "query_dtype"
# The one pool dtype the kernel converts (its bit-exactness is what the tests prove).
POOL_DTYPE_NAME = "float8_e4m3fn"
# Rows per grid-stride iteration of one program; 16 rows x 576 B keeps ~9 KB of loads in flight.
BLOCK_ROWS = 16
NUM_WARPS = 4
# Programs per SM of the persistent grid: enough warps in flight to cover DRAM latency. With the
# cache hints below, 16 reached 1.24x / 1.30x the copy floor at 32K / 131K active tokens on an
# H200, 24 and 32 the same within the run's noise, 8 fell short at 131K; before the hints 8 was
# 1.47x / 1.39x (bench/results/kv_gather_cast_tune_h200.json, kv_gather_cast_bound_h200.json).
PROGRAMS_PER_SM = 16
# The interpreter (CPU) runs programs one after another, so a small grid keeps tests fast and
# still exercises the grid-stride loop (several iterations per program).
INTERPRETER_PROGRAMS = 3

logger = logging.getLogger(__name__)


def switch_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """The runtime switch: "1" takes the gather-then-cast path, anything else the stock one."""
    env = os.environ if environ is None else environ
    return env.get(SWITCH_ENV, "") == "1"


def format_marker(state: str, **fields: object) -> str:
    """`MARKER state key=value ...`; whitespace is dropped from values so the line splits cleanly."""
    parts = [MARKER, state]
    parts += [f"{key}={''.join(str(value).split())}" for key, value in fields.items()]
    return " ".join(parts)


def parse_marker(line: str) -> dict[str, str | int] | None:
    """The marker in one log line (any prefix before it), or None if the line carries none.

    Returns {"state": "active" | "inactive", key: value, ...}; all-digit values become ints.
    """
    at = line.find(MARKER)
    if at < 0:
        return None
    tokens = line[at + len(MARKER):].split()
    if not tokens or tokens[0] not in (ACTIVE, INACTIVE):
        return None
    fields: dict[str, str | int] = {"state": tokens[0]}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if sep and key and key != "state":
            fields[key] = int(value) if value.isascii() and value.isdigit() else value
    return fields


def _announce(level: int, state: str, **fields: object) -> None:
    logger.log(level, "%s", format_marker(state, **fields))


def split_row(row_elems: int) -> tuple[int, int]:
    """Split a row into two power-of-two column tiles (576 -> 512 + 64), as Triton needs."""
    if row_elems <= 0:
        raise ValueError(f"row width must be positive, got {row_elems}")
    head = 1 << (row_elems.bit_length() - 1)
    tail = row_elems - head
    if tail and tail & (tail - 1):
        raise ValueError(f"row width {row_elems} is not a sum of two powers of two")
    return head, tail


def workspace_bytes(pool_rows: int, row_elems: int = 576, out_itemsize: int = 2) -> int:
    """Bytes of the BF16 workspace for a pool of `pool_rows` rows (sglang: size + page_size)."""
    return pool_rows * row_elems * out_itemsize


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


@functools.cache
def _kernel(interpret: bool) -> Any:
    """Build the Triton kernel once per mode (the interpreter decides at decoration time)."""
    del interpret  # part of the cache key only
    import triton
    import triton.language as tl

    @triton.jit
    def gather_cast_rows(
        src,
        dst,
        indices,
        indptr,
        bs,
        num_rows,
        linear_min_ids,
        src_row_stride,
        dst_row_stride,
        HEAD: tl.constexpr,
        TAIL: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        # The active count lives on the device: the launch is identical at every replay.
        start = tl.load(indptr)
        count = tl.load(indptr + bs) - start
        # Bounded work: from `linear_min_ids` ids on (the pool's rows), convert every pool row
        # in order instead: coalesced, no index reads, never more than the stock full cast. The
        # rows attention reads get the same bits either way.
        linear = count >= linear_min_ids
        todo = tl.where(linear, num_rows, count)
        head_cols = tl.arange(0, HEAD)
        # A while loop, not range(): the same code then runs in the CPU interpreter too.
        first = pid * BLOCK
        while first < todo:
            rows = first + tl.arange(0, BLOCK)
            live = rows < todo
            if linear:
                ids = rows.to(tl.int64)
            else:
                ids = tl.load(indices + start + rows, mask=live, other=0).to(tl.int64)
            # A slot id outside the pool is never converted (stock would read garbage there too).
            live = live & (ids >= 0) & (ids < num_rows)
            src_rows = src + ids[:, None] * src_row_stride
            dst_rows = dst + ids[:, None] * dst_row_stride
            mask = live[:, None]
            # Both loads before either store (more bytes in flight); every pool row is read once
            # per step (evict_first) and every workspace row is written once, read later by
            # attention from DRAM (streaming stores). Hints only: the same bits either way.
            x = tl.load(src_rows + head_cols[None, :], mask=mask, eviction_policy="evict_first")
            if TAIL > 0:
                tail_cols = HEAD + tl.arange(0, TAIL)
                y = tl.load(src_rows + tail_cols[None, :], mask=mask,
                            eviction_policy="evict_first")
                tl.store(dst_rows + tail_cols[None, :], y.to(dst.dtype.element_ty), mask=mask,
                         cache_modifier=".cs")
            tl.store(dst_rows + head_cols[None, :], x.to(dst.dtype.element_ty), mask=mask,
                     cache_modifier=".cs")
            first += nprog * BLOCK

    return gather_cast_rows


def default_num_programs(device: torch.device, programs_per_sm: int = PROGRAMS_PER_SM) -> int:
    """Fixed grid size for `device`: a persistent grid that a grid-stride loop fills."""
    import torch

    if _interpreting() or device.type != "cuda":
        return INTERPRETER_PROGRAMS
    return torch.cuda.get_device_properties(device).multi_processor_count * programs_per_sm


def is_fp8_e4m3(tensor: torch.Tensor) -> bool:
    """Whether `tensor` holds e4m3 values (a uint8 view of the same bytes would convert wrongly)."""
    import torch

    return bool(tensor.dtype == getattr(torch, POOL_DTYPE_NAME))


class GatherCastWorkspace:
    """One BF16 buffer shaped like one layer's KV pool, shared by every layer of a backend."""

    def __init__(
        self,
        pool_rows: int,
        row_elems: int,
        dtype: torch.dtype,
        device: torch.device | str,
        num_programs: int | None = None,
        block_rows: int = BLOCK_ROWS,
        num_warps: int = NUM_WARPS,
        linear_min_ids: int | None = None,
    ) -> None:
        import torch

        self.head, self.tail = split_row(row_elems)
        self.device = torch.device(device)
        # Allocated once, before any graph capture, so it never lives in a graph's pool; zeroed,
        # so a row no step has converted yet holds 0.0, never what the allocator left there.
        self.buffer = torch.zeros((pool_rows, 1, row_elems), dtype=dtype, device=self.device)
        self.num_programs = num_programs or default_num_programs(self.device)
        self.block_rows = block_rows
        self.num_warps = num_warps
        # Id count from which a step converts the whole pool linearly (default: the pool's rows,
        # where the gather would move at least as many bytes as the full cast).
        self.linear_min_ids = pool_rows if linear_min_ids is None else linear_min_ids

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def convert(
        self, pool: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor
    ) -> torch.Tensor:
        """Write bf16(pool[id]) at workspace[id] for id in kv_indices[kv_indptr[0]:kv_indptr[-1]].

        `kv_indptr` is the decode/prefill indptr sliced to bs + 1 entries; its last entry is read
        on the device. When that count reaches `linear_min_ids`, every row is written instead.
        Returns the whole workspace, shaped like `pool` (rows outside the active set hold what an
        earlier layer or step left there, or zeros; attention never reads them).
        """
        if pool.shape != self.buffer.shape:
            raise ValueError(f"pool shape {tuple(pool.shape)} != workspace {tuple(self.buffer.shape)}")
        bs = kv_indptr.shape[0] - 1
        if bs < 0:
            return self.buffer
        kernel = _kernel(_interpreting())
        kernel[(self.num_programs,)](
            pool,
            self.buffer,
            kv_indices,
            kv_indptr,
            bs,
            pool.shape[0],
            self.linear_min_ids,
            pool.stride(0),
            self.buffer.stride(0),
            HEAD=self.head,
            TAIL=self.tail,
            BLOCK=self.block_rows,
            num_warps=self.num_warps,
        )
        return self.buffer


def create_workspace(
    pool: torch.Tensor, dtype: torch.dtype, layers: int | None = None, role: str | None = None
) -> GatherCastWorkspace | None:
    """A workspace for `pool` (one layer's key buffer, (rows, 1, row_elems)), or None.

    Logs the one marker line: `active` with the workspace's size, or `inactive` with the reason
    the stock path stays (a pool that is not FP8 e4m3, e.g. BF16 KV, needs no cast kernel).
    `role` (ROLE_TARGET or ROLE_DRAFT), when given, ends the line.
    """
    tag = {} if role is None else {"role": role}
    if not is_fp8_e4m3(pool) or pool.dtype == dtype:
        reason = REASON_QUERY_DTYPE if is_fp8_e4m3(pool) else REASON_POOL_NOT_FP8
        _announce(logging.WARNING, INACTIVE, reason=reason, pool_dtype=pool.dtype, dtype=dtype,
                  **tag)
        return None
    if pool.dim() != 3 or pool.shape[1] != 1:
        _announce(logging.WARNING, INACTIVE, reason=REASON_POOL_SHAPE,
                  pool_shape="x".join(str(n) for n in pool.shape), **tag)
        return None
    rows, _, row_elems = pool.shape
    workspace = GatherCastWorkspace(rows, row_elems, dtype, pool.device)
    _announce(logging.INFO, ACTIVE, workspace_bytes=workspace.nbytes, rows=rows,
              row_elems=row_elems, layers="unknown" if layers is None else layers,
              dtype=dtype, device=pool.device, programs=workspace.num_programs, **tag)
    return workspace


def workspace_for_backend(
    kv_pool: Any, dtype: torch.dtype, skip_prefill: bool,
    environ: Mapping[str, str] | None = None,
) -> GatherCastWorkspace | None:
    """Start-up hook of the 0.5.9 patch set's backend; touches the pool only if switched on.

    That patch set leaves speculative batches on the stock path, so its draft-decode backends
    (`skip_prefill`) get no workspace and log nothing. The 0.5.15 and 0.5.23 patch sets convert
    the speculative rows too and call `workspace_for_pool` instead.
    """
    if skip_prefill:
        return None
    if not switch_enabled(environ):
        _announce(logging.INFO, INACTIVE, reason=REASON_SWITCH_OFF, switch=SWITCH_ENV)
        return None
    first_layer = getattr(kv_pool, "start_layer", 0) or 0
    return create_workspace(kv_pool.get_key_buffer(first_layer), dtype,
                            getattr(kv_pool, "layer_num", None))


def workspace_for_pool(
    kv_pool: Any, dtype: torch.dtype, draft: bool, environ: Mapping[str, str] | None = None,
) -> GatherCastWorkspace | None:
    """Start-up hook of the patched backend (0.5.15, 0.5.23): one workspace per KV pool.

    Every flashinfer MLA backend over the same pool gets the same workspace (or the same None),
    decided, allocated and announced once: the target model's backends share one; the draft
    model's (MTP/EAGLE: one backend per draft-decode step and the draft-extend backend, all over
    the draft model's own pool) share another. Sharing is safe because a workspace row is written
    and then read within one layer's forward, and every forward over a pool runs in order on one
    stream. The marker line carries `role=target` or `role=draft` (`draft`: the model runner's
    is_draft_worker), so a patched MTP server logs two lines per rank, both `active`.
    """
    held = getattr(kv_pool, POOL_ATTR, None)
    if held is not None:
        return held[0]
    role = ROLE_DRAFT if draft else ROLE_TARGET
    workspace = None
    if not switch_enabled(environ):
        _announce(logging.INFO, INACTIVE, reason=REASON_SWITCH_OFF, switch=SWITCH_ENV, role=role)
    else:
        first_layer = getattr(kv_pool, "start_layer", 0) or 0
        workspace = create_workspace(kv_pool.get_key_buffer(first_layer), dtype,
                                     getattr(kv_pool, "layer_num", None), role=role)
    setattr(kv_pool, POOL_ATTR, (workspace,))
    return workspace


def graph_rows(wrapper: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(kv_indptr, kv_indices) of a CUDA-graph flashinfer MLA wrapper: the buffers it owns.

    A wrapper made with `use_cuda_graph=True` keeps the index buffers it was given, and every plan
    copies the step's rows into them in place (flashinfer 0.6.12 mla/_core.py:843-847; 0.7.2
    mla/_batch_mla/_backends/_fa_common.py:532-555; sglang 0.5.23's own replay plan,
    fast_mla_prefill_plan, copies into the same two attributes). So a graph captured with them
    reads the current step's rows at every replay. None for any other wrapper.
    """
    indptr = getattr(wrapper, "_kv_indptr_buf", None)
    indices = getattr(wrapper, "_kv_indices_buf", None)
    if not getattr(wrapper, "_use_cuda_graph", False) or indptr is None or indices is None:
        return None
    return indptr, indices


def rows_for_forward(
    rows: tuple[torch.Tensor, torch.Tensor] | None, graph_safe: bool, capturing: bool,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The planned rows a forward may use: while a CUDA graph is being captured, only rows whose
    buffers every replay refills in place (`graph_safe`: the verify graph's `graph_rows`); rows
    planned into fresh tensors (eager verify, a paged prefill) would be frozen into the graph, so
    the stock cast stays there."""
    if rows is None or (capturing and not graph_safe):
        return None
    return rows


def stock_reason(
    workspace: GatherCastWorkspace | None,
    pool: torch.Tensor,
    rows: tuple[torch.Tensor, torch.Tensor] | None,
    dtype: torch.dtype,
) -> str | None:
    """Why this forward keeps the stock `pool.to(dtype)`, or None when the kernel runs.

    Stock whenever the kernel's result could differ from it: no workspace, rows not planned by
    the patched updaters (DCP, a prefill being captured; on 0.5.9 every speculative batch), a
    pool that is not FP8 e4m3, a workspace dtype other than the query's, or a pool of another
    shape.
    """
    if workspace is None:
        return REASON_NO_WORKSPACE
    if rows is None:
        return REASON_ROWS_UNKNOWN
    if not is_fp8_e4m3(pool):
        return REASON_POOL_NOT_FP8
    if workspace.buffer.dtype != dtype:
        return REASON_QUERY_DTYPE
    if pool.shape != workspace.buffer.shape:
        return REASON_POOL_SHAPE
    return None


def key_buffer_for_attention(
    workspace: GatherCastWorkspace | None,
    pool: torch.Tensor,
    rows: tuple[torch.Tensor, torch.Tensor] | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    """What the patched backend calls in place of `pool.to(dtype)`.

    `rows` is (kv_indptr[: bs + 1], kv_indices) as planned for this forward; `stock_reason`
    decides between the kernel and the stock full-pool cast.
    """
    if workspace is not None and rows is not None and not stock_reason(workspace, pool, rows, dtype):
        return workspace.convert(pool, rows[0], rows[1])
    return pool.to(dtype)
