"""Percentiles for latency reports: linear interpolation between closest ranks.

The same definition as numpy's default (`method="linear"`) and sglang's benchmark (which calls
`np.percentile`): for sorted values x[0..n-1] and p in [0, 100], the rank is r = p/100 * (n-1);
the result is x[floor(r)] + (r - floor(r)) * (x[floor(r)+1] - x[floor(r)]).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile {p} outside 0..100")
    ordered = sorted(values)
    rank = p / 100.0 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def percentiles(values: Sequence[float], ps: Sequence[float]) -> dict[str, float | None]:
    """{"p50": ..., "p90": ...}; None for every p when there are no values."""
    return {f"p{p:g}": (percentile(values, p) if values else None) for p in ps}
