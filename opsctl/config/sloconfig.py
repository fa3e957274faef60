"""The profile's `slo:` section: each latency objective stated once, read alike by smoke, bench
and the alert rules.

An objective says: *in each slice of time, at least `quantile` of the requests have a latency at
or under `threshold_ms`; that holds in at least `target` of the slices over `window`.*

    slo:
      tpot: {quantile: 0.5, threshold_ms: 80, target: 0.99, window: 30d}
      ttft: {quantile: 0.5, threshold_ms: 2000, target: 0.99, window: 30d}

reads "the median TPOT is at most 80 ms in 99% of the time over 30 days". `opsctl smoke` is one
slice (`check`: does its own run meet the quantile?); `opsctl bench` counts the requests that meet
every stated threshold (`goodput`); the burn-rate alerts count slices whose share of requests
within the threshold falls under `quantile`, against the budget `1 - target` over `window`
(opsctl/observe/promslo.py).

A share within the threshold is used instead of an interpolated quantile: "at least q of the
requests at or under T" is exactly "the q-quantile is at most T", it needs no interpolation, and
it is what a Prometheus histogram bucket with its edge at T counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

_UNITS = {"m": 60, "h": 3600, "d": 86400}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def duration_seconds(text: str) -> int:
    """`30d`, `6h`, `90m` -> seconds."""
    match = re.fullmatch(r"([1-9]\d*)([mhd])", text)
    if not match:
        raise ValueError(f"bad duration {text!r} (use e.g. 90m, 6h, 30d)")
    return int(match.group(1)) * _UNITS[match.group(2)]


class Objective(_Strict):
    """One latency objective (see the module docstring for how it reads)."""

    quantile: float = Field(gt=0, lt=1, description="Share of requests in each slice of time "
                            "that must be at or under threshold_ms (0.5: the median).")
    threshold_ms: float = Field(gt=0, description="Latency limit in milliseconds. The alerts "
                                "need it on an edge of sglang's histogram buckets.")
    target: float = Field(0.99, gt=0, lt=1, description="Share of time the quantile must hold; "
                          "1 - target is the error budget the burn-rate alerts spend.")
    window: str = Field("30d", pattern=r"^[1-9]\d*[mhd]$",
                        description="Period the target is accounted over (e.g. 30d).")

    @property
    def threshold_seconds(self) -> float:
        return self.threshold_ms / 1000.0

    @property
    def window_seconds(self) -> int:
        return duration_seconds(self.window)


class Slo(_Strict):
    tpot: Objective | None = Field(None, description="Time per output token, per request.")
    ttft: Objective | None = Field(None, description="Time to first token.")


# --- evaluation: pure functions smoke and bench call with their own measurements -------------


def share_within(values_s: Sequence[float], threshold_s: float) -> float | None:
    """Share of the values at or under the threshold; None without values."""
    if not values_s:
        return None
    return sum(1 for v in values_s if v <= threshold_s) / len(values_s)


def quantile_value(values_s: Sequence[float], quantile: float) -> float | None:
    """The smallest value v with at least `quantile` of the values at or under it (nearest rank).

    `quantile_value(x, q) <= T` holds exactly when `share_within(x, T) >= q`.
    """
    if not values_s:
        return None
    ordered = sorted(values_s)
    return ordered[max(0, math.ceil(quantile * len(ordered)) - 1)]


@dataclass(frozen=True)
class SloCheck:
    """One objective against one run's measurements (what smoke reports)."""

    quantile: float
    threshold_ms: float
    observed_ms: float | None  # the run's `quantile`-quantile; None without measurements
    within_share: float | None  # share of the run's requests at or under the threshold
    passed: bool | None  # None: nothing measured, so nothing to judge


def check(objective: Objective, values_s: Sequence[float]) -> SloCheck:
    """Does one run (one slice of time) meet the objective's quantile?"""
    share = share_within(values_s, objective.threshold_seconds)
    observed = quantile_value(values_s, objective.quantile)
    return SloCheck(
        quantile=objective.quantile,
        threshold_ms=objective.threshold_ms,
        observed_ms=None if observed is None else observed * 1000.0,
        within_share=share,
        passed=None if share is None else share >= objective.quantile,
    )


def request_is_good(slo: Slo, ttft_s: float | None, tpot_s: float | None) -> bool:
    """A request that meets every stated threshold (a missing measurement does not)."""
    for objective, value in ((slo.ttft, ttft_s), (slo.tpot, tpot_s)):
        if objective is not None and (value is None or value > objective.threshold_seconds):
            return False
    return True


def goodput(slo: Slo, requests: Iterable[tuple[float | None, float | None]],
            duration_s: float) -> float:
    """Requests per second that met every stated threshold, from (ttft_s, tpot_s) pairs."""
    if duration_s <= 0:
        raise ValueError("duration_s must be positive")
    return sum(1 for ttft, tpot in requests if request_is_good(slo, ttft, tpot)) / duration_s
