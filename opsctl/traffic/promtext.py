"""A few named series out of a Prometheus text exposition, histogram deltas and their quantiles.

Only the sample names asked for are parsed; every other line costs one prefix test, so a
scrape every second of a large /metrics page stays cheap next to the load it measures. A line
that does not parse (garbage, a value that is not a number) is skipped, never fatal: the caller
reports a series it needed and did not get.

Quantiles are estimates from cumulative buckets, interpolated linearly inside the bucket the
rank falls in, as Prometheus' histogram_quantile() does (lower edge 0 for the first bucket; a
rank in the +Inf bucket gives the highest finite edge, flagged as a lower bound).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs
Parsed = dict[str, dict[Labels, float]]  # sample name -> label set -> value

_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_LABEL_BLOCK = re.compile(r'\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\}')
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_selected(text: str, names: Iterable[str]) -> Parsed:
    """The samples of `names` (exact sample names, e.g. `x_bucket`), by label set; the last
    sample of a repeated label set wins."""
    wanted = frozenset(names)
    prefixes = tuple({name[:6] for name in wanted})
    found: Parsed = {}
    for line in text.splitlines():
        if not line.startswith(prefixes):
            continue
        match = _NAME.match(line)
        if match is None or match.group() not in wanted:
            continue
        rest = line[match.end():]
        labels: Labels | None = ()
        if rest.startswith("{"):
            block = _LABEL_BLOCK.match(rest)
            if block is None:
                continue
            labels = _labels(block.group(1))
            rest = rest[block.end():]
        value = _value(rest)
        if value is not None and labels is not None:
            found.setdefault(match.group(), {})[labels] = value
    return found


def _labels(block: str) -> Labels | None:
    pairs, position = [], 0
    while position < len(block.rstrip()):
        match = _LABEL.match(block, position)
        if match is None:
            return None
        value = re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group()], match.group(2))
        pairs.append((match.group(1), value))
        position = match.end()
    return tuple(sorted(pairs))


def _value(rest: str) -> float | None:
    fields = rest.split()
    if not fields:
        return None
    try:
        return float(fields[0])  # also "NaN", "+Inf", "-Inf"
    except ValueError:
        return None


@dataclass(frozen=True)
class Histogram:
    """One histogram's state: cumulative (upper edge, count) pairs ending at +Inf, sum, count."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


class HistogramError(ValueError):
    """A histogram that cannot be read or subtracted; the message says why, in words."""


def histograms(parsed: Parsed, base: str) -> dict[Labels, Histogram]:
    """Every label set (without `le`) of histogram `base` that has buckets, a sum and a count."""
    by_set: dict[Labels, dict[float, float]] = {}
    for labels, value in parsed.get(f"{base}_bucket", {}).items():
        edge = dict(labels).get("le")
        if edge is None:
            continue
        try:
            upper = float(edge)
        except ValueError:
            continue
        rest = tuple(pair for pair in labels if pair[0] != "le")
        by_set.setdefault(rest, {})[upper] = value
    sums, counts = parsed.get(f"{base}_sum", {}), parsed.get(f"{base}_count", {})
    found: dict[Labels, Histogram] = {}
    for labels, edges in by_set.items():
        if labels in sums and labels in counts and math.inf in edges:
            found[labels] = Histogram(tuple(sorted(edges.items())), sums[labels], counts[labels])
    return found


def _finite(histogram: Histogram) -> bool:
    values = [histogram.sum, histogram.count, *(count for _, count in histogram.buckets)]
    return all(math.isfinite(value) for value in values)


def delta(start: Mapping[Labels, Histogram], end: Mapping[Labels, Histogram]) -> Histogram:
    """end - start, summed over label sets. A label set new at the end started from zero (sglang
    creates a series on its first observation). Raises HistogramError on a reset (a series gone
    or a count gone down: the server restarted), NaN, or label sets with different buckets."""
    edges = _common_edges(start, end)
    totals = [0.0] * len(edges)
    total_sum = total_count = 0.0
    for labels, last in end.items():
        steps, count, added = _series_delta(start.get(labels), last, edges)
        totals = [t + s for t, s in zip(totals, steps, strict=True)]
        total_sum += added
        total_count += count
    level = Histogram(tuple(zip(edges, totals, strict=True)), total_sum, total_count)
    if not _finite(level):  # finite figures whose differences or sums overflow
        raise HistogramError("NaN or infinite values")
    return level


def _common_edges(start: Mapping[Labels, Histogram],
                  end: Mapping[Labels, Histogram]) -> tuple[float, ...]:
    """The bucket edges every label set at the end uses; HistogramError where there are no
    series, a series is gone, or the label sets' buckets differ."""
    if not end:
        raise HistogramError("no series at the end of the level")
    gone = [labels for labels in start if labels not in end]
    if gone:
        raise HistogramError("reset: a series present at the start is gone at the end "
                             "(the server restarted?)")
    edges = {tuple(edge for edge, _ in h.buckets) for h in end.values()}
    if len(edges) != 1:
        raise HistogramError("its label sets use different buckets")
    return next(iter(edges))


def _series_delta(first: Histogram | None, last: Histogram,
                  edges: tuple[float, ...]) -> tuple[list[float], float, float]:
    """One label set's bucket increments, count and sum over the level (from zero when it is
    new at the end); HistogramError on NaN, changed buckets or a reset."""
    if not _finite(last) or (first is not None and not _finite(first)):
        raise HistogramError("NaN or infinite values")
    if first is None:
        first = Histogram(tuple((edge, 0.0) for edge, _ in last.buckets), 0.0, 0.0)
    elif tuple(e for e, _ in first.buckets) != edges:
        raise HistogramError("its buckets changed during the level")
    steps = [b - a for (_, a), (_, b) in zip(first.buckets, last.buckets, strict=True)]
    count = last.count - first.count
    added = last.sum - first.sum
    # Latencies are never negative, so neither a count nor the sum may go down.
    if min(steps, default=0.0) < 0 or count < 0 or added < -1e-9 * abs(last.sum):
        raise HistogramError("reset: a count went down during the level (the server "
                             "restarted?)")
    return steps, count, added


def bucket_quantile(q: float, histogram: Histogram) -> tuple[float | None, bool]:
    """(estimate, whether it is only a lower bound: the rank is in the +Inf bucket)."""
    buckets = histogram.buckets
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None, False
    rank = q * total
    lower, below, monotone = 0.0, 0.0, 0.0
    for index, (upper, cumulative) in enumerate(buckets):
        monotone = max(monotone, cumulative)  # as Prometheus: never let a bucket go down
        if monotone >= rank:
            if math.isinf(upper):
                finite = buckets[index - 1][0] if index else None
                return finite, True
            if index == 0 and upper <= 0:
                return upper, False
            inside = monotone - below
            share = (rank - below) / inside if inside > 0 else 1.0
            return lower + (upper - lower) * share, False
        lower, below = upper, monotone
    return None, False
