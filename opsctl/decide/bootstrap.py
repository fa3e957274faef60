"""Bootstrap 95% intervals of a level's figures from its per-request records, over repeats.

Percentile bootstrap, two-stage: each resample draws the repeats with replacement, then within
each drawn repeat its requests with replacement, so the interval holds both the request-to-
request spread and the run-to-run wobble between repeats (a server restarted between them).
Seeded (the same records give the same interval) and bounded: RESAMPLES resamples, fewer when
the records are many (at most MAX_DRAWS requests drawn in all, never fewer than MIN_RESAMPLES).

A figure is computed from one resample as the level computes it:
- TPOT p50: the median of the per-request TPOTs of every drawn request;
- output tokens/s: per drawn repeat, concurrency x sum(output tokens) / sum(E2E) (Little's law
  for a closed loop: at c streams the tokens per second are c tokens per request over its E2E),
  averaged over the drawn repeats; the interval is that estimator's spread applied to the
  measured figure (the mean over repeats of tokens over the phase's wall time);
- SLO goodput: per drawn repeat, the drawn requests meeting every stated limit over the phase's
  wall time, averaged.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opsctl.config.sloconfig import Slo, request_is_good
from opsctl.traffic.bench.stats import percentile

RESAMPLES = 1000
MIN_RESAMPLES = 200
MAX_DRAWS = 2_000_000
SEED = 20231
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Repeat:
    """One repeat's measured requests at a level (their records) and its wall time."""

    records: list[dict[str, Any]]
    duration_s: float
    concurrency: int


Interval = tuple[float, float]
Statistic = Callable[[list[tuple[Repeat, list[dict[str, Any]]]]], float | None]


def _number(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, int | float) else None


def tpot_p50(drawn: list[tuple[Repeat, list[dict[str, Any]]]]) -> float | None:
    values = [t for _, records in drawn for r in records
              if r.get("ok") and (t := _number(r, "tpot_s")) is not None]
    return percentile(values, 50) * 1000.0 if values else None


def little_throughput(drawn: list[tuple[Repeat, list[dict[str, Any]]]]) -> float | None:
    rates = []
    for repeat, records in drawn:
        ok = [r for r in records if r.get("ok")]
        e2e = sum(_number(r, "e2e_s") or 0.0 for r in ok)
        if e2e > 0:
            rates.append(repeat.concurrency * sum(_number(r, "output_tokens") or 0.0 for r in ok)
                         / e2e)
    return sum(rates) / len(rates) if rates else None


def goodput_rate(slo: Slo) -> Statistic:
    def rate(drawn: list[tuple[Repeat, list[dict[str, Any]]]]) -> float | None:
        rates = [sum(1 for r in records if r.get("ok") and request_is_good(
                     slo, _number(r, "ttft_s"), _number(r, "tpot_s"))) / repeat.duration_s
                 for repeat, records in drawn if repeat.duration_s > 0]
        return sum(rates) / len(rates) if rates else None
    return rate


def resamples(repeats: Sequence[Repeat]) -> int:
    drawn = max(1, sum(len(r.records) for r in repeats))
    return max(MIN_RESAMPLES, min(RESAMPLES, MAX_DRAWS // drawn))


def replicate(repeats: Sequence[Repeat], statistic: Statistic, seed: int = SEED
              ) -> list[float]:
    """The statistic over each resample (those where it is defined)."""
    rng = random.Random(seed)
    values = []
    for _ in range(resamples(repeats)):
        chosen = [repeats[rng.randrange(len(repeats))] for _ in repeats]
        drawn = [(repeat, [repeat.records[rng.randrange(len(repeat.records))]
                           for _ in repeat.records] if repeat.records else [])
                 for repeat in chosen]
        value = statistic(drawn)
        if value is not None:
            values.append(value)
    return values


def bounds(values: Sequence[float]) -> Interval | None:
    if not values:
        return None
    tail = (1.0 - CONFIDENCE) / 2 * 100
    return (percentile(values, tail), percentile(values, 100 - tail))


def interval(repeats: Sequence[Repeat], statistic: Statistic, seed: int = SEED
             ) -> Interval | None:
    """The percentile bootstrap's 95% interval of `statistic`; None without records."""
    if not repeats or not any(r.records for r in repeats):
        return None
    return bounds(replicate(repeats, statistic, seed))


def scaled_interval(repeats: Sequence[Repeat], statistic: Statistic, measured: float,
                    seed: int = SEED) -> Interval | None:
    """The interval of an estimator's spread, relative to its value on all records, applied to
    the `measured` figure (for throughput: see the module docstring)."""
    whole = statistic([(r, r.records) for r in repeats])
    if not whole:
        return None
    found = interval(repeats, statistic, seed)
    if found is None:
        return None
    return (measured * found[0] / whole, measured * found[1] / whole)


def ratio_interval(a: Sequence[Repeat], b: Sequence[Repeat], statistic: Statistic,
                   seed: int = SEED) -> Interval | None:
    """95% interval of statistic(a) / statistic(b), each side resampled on its own."""
    first, second = replicate(a, statistic, seed), replicate(b, statistic, seed + 1)
    ratios = [x / y for x, y in zip(first, second, strict=False) if y]
    return bounds(ratios)
