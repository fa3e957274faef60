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

Graph safety: the active-row count is read on the device (`kv_indptr[bs] - kv_indptr[0]`), the
grid is fixed when the workspace is made (a grid-stride loop covers any count), and a step does
no host sync, no allocation and no `arange`. The price is one pool-sized BF16 buffer per GPU:
`workspace_bytes(rows)`, logged at start-up and budgeted in the profile's memory fraction.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Must equal opsctl.profiles.PATCH_SWITCH_ENV (a unit test holds them together).
SWITCH_ENV = "OPSCTL_KV_GATHER_CAST"
# Rows per grid-stride iteration of one program; 16 rows x 576 B keeps ~9 KB of loads in flight.
BLOCK_ROWS = 16
NUM_WARPS = 4
# Programs per SM of the persistent grid: enough warps in flight to cover DRAM latency.
PROGRAMS_PER_SM = 8
# The interpreter (CPU) runs programs one after another, so a small grid keeps tests fast and
# still exercises the grid-stride loop (several iterations per program).
INTERPRETER_PROGRAMS = 3

logger = logging.getLogger(__name__)


def switch_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """The runtime switch: "1" takes the gather-then-cast path, anything else the stock one."""
    env = os.environ if environ is None else environ
    return env.get(SWITCH_ENV, "") == "1"


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
        head_cols = tl.arange(0, HEAD)
        # A while loop, not range(): the same code then runs in the CPU interpreter too.
        first = pid * BLOCK
        while first < count:
            rows = first + tl.arange(0, BLOCK)
            live = rows < count
            ids = tl.load(indices + start + rows, mask=live, other=0)
            # A slot id outside the pool is never converted (stock would read garbage there too).
            live = live & (ids >= 0) & (ids < num_rows)
            ids = ids.to(tl.int64)
            src_rows = src + ids[:, None] * src_row_stride
            dst_rows = dst + ids[:, None] * dst_row_stride
            mask = live[:, None]
            x = tl.load(src_rows + head_cols[None, :], mask=mask)
            tl.store(dst_rows + head_cols[None, :], x.to(dst.dtype.element_ty), mask=mask)
            if TAIL > 0:
                tail_cols = HEAD + tl.arange(0, TAIL)
                y = tl.load(src_rows + tail_cols[None, :], mask=mask)
                tl.store(dst_rows + tail_cols[None, :], y.to(dst.dtype.element_ty), mask=mask)
            first += nprog * BLOCK

    return gather_cast_rows


def default_num_programs(device: torch.device, programs_per_sm: int = PROGRAMS_PER_SM) -> int:
    """Fixed grid size for `device`: a persistent grid that a grid-stride loop fills."""
    import torch

    if _interpreting() or device.type != "cuda":
        return INTERPRETER_PROGRAMS
    return torch.cuda.get_device_properties(device).multi_processor_count * programs_per_sm


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
    ) -> None:
        import torch

        self.head, self.tail = split_row(row_elems)
        self.device = torch.device(device)
        # Allocated once, before any graph capture, so it never lives in a graph's pool.
        self.buffer = torch.empty((pool_rows, 1, row_elems), dtype=dtype, device=self.device)
        self.num_programs = num_programs or default_num_programs(self.device)
        self.block_rows = block_rows
        self.num_warps = num_warps

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def convert(
        self, pool: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor
    ) -> torch.Tensor:
        """Write bf16(pool[id]) at workspace[id] for id in kv_indices[kv_indptr[0]:kv_indptr[-1]].

        `kv_indptr` is the decode/prefill indptr sliced to bs + 1 entries; its last entry is read
        on the device. Returns the whole workspace, shaped like `pool` (rows outside the active
        set hold whatever an earlier layer or step left there; attention never reads them).
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
            pool.stride(0),
            self.buffer.stride(0),
            HEAD=self.head,
            TAIL=self.tail,
            BLOCK=self.block_rows,
            num_warps=self.num_warps,
        )
        return self.buffer


def maybe_create_workspace(
    pool: torch.Tensor, dtype: torch.dtype, environ: Mapping[str, str] | None = None
) -> GatherCastWorkspace | None:
    """The backend's start-up hook: a workspace when the switch is on and the pool is FP8.

    `pool` is one layer's key buffer as the backend reads it (rows, 1, row_elems).
    """
    if not switch_enabled(environ):
        return None
    if pool.dtype == dtype or pool.element_size() != 1 or pool.dim() != 3:
        logger.warning(
            "%s=1 but the KV pool is %s %s, not a 1-byte FP8 pool: stock path kept",
            SWITCH_ENV, pool.dtype, tuple(pool.shape),
        )
        return None
    rows, heads, row_elems = pool.shape
    if heads != 1:
        logger.warning("%s=1 but the pool has %d heads: stock path kept", SWITCH_ENV, heads)
        return None
    workspace = GatherCastWorkspace(rows, row_elems, dtype, pool.device)
    logger.info(
        "opsctl gather-then-cast on: BF16 workspace of %d bytes (%d rows x %d x %d B) on %s, "
        "grid %d programs",
        workspace.nbytes, rows, row_elems, workspace.buffer.element_size(), pool.device,
        workspace.num_programs,
    )
    return workspace


def workspace_for_backend(
    kv_pool: Any, dtype: torch.dtype, skip_prefill: bool
) -> GatherCastWorkspace | None:
    """Start-up hook of the patched flashinfer MLA backend; touches the pool only if switched on.

    Draft-decode backends (`skip_prefill`) only ever see speculative batches, which keep the
    stock path, so they get no workspace.
    """
    if skip_prefill or not switch_enabled():
        return None
    first_layer = getattr(kv_pool, "start_layer", 0) or 0
    return maybe_create_workspace(kv_pool.get_key_buffer(first_layer), dtype)


def key_buffer_for_attention(
    workspace: GatherCastWorkspace | None,
    pool: torch.Tensor,
    rows: tuple[torch.Tensor, torch.Tensor] | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    """What the patched backend calls in place of `pool.to(dtype)`.

    `rows` is (kv_indptr[: bs + 1], kv_indices) as planned for this forward; None (speculative,
    DCP, or a path this patch does not cover) keeps the stock full-pool cast.
    """
    if workspace is None or rows is None or pool.dtype == dtype:
        return pool.to(dtype)
    return workspace.convert(pool, rows[0], rows[1])
