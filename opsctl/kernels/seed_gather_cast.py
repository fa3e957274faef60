"""REFERENCE ONLY: the seed's gather-then-cast, kept to benchmark against. Eager mode only.

The seed gathered the active rows with torch indexing, cast them, and re-planned flashinfer with
`torch.arange(n)` as the indices. Every size in it is a host integer, so under sglang's decode
CUDA-graph replay it is silently wrong (sizes frozen at capture, the fast re-plan ignores new
indices, the index buffer is shared). Never install it; `kv_gather_cast` is the shipped design.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def seed_plan_indices(n: int, device: torch.device | str) -> torch.Tensor:
    """The identity indices the seed re-planned with, made anew every step."""
    import torch

    return torch.arange(n, dtype=torch.int32, device=device)


def seed_gather_cast(
    pool: torch.Tensor, kv_indices: torch.Tensor, n: int, dtype: torch.dtype
) -> torch.Tensor:
    """Compact BF16 copy of the `n` active rows: `pool[kv_indices[:n]].to(dtype)`.

    The gather goes through a uint8 view (same bytes) because FP8 advanced indexing is not
    implemented on every torch build; the result is what the seed's two ops produced.
    """
    import torch

    ids = kv_indices[:n].long()
    if pool.element_size() == 1 and pool.dtype != torch.uint8:
        return pool.view(torch.uint8)[ids].view(pool.dtype).to(dtype)
    return pool[ids].to(dtype)
