"""Building blocks of opsctl's Prometheus rules: timings, PromQL helpers, the alert shape.

Production windows follow the SRE workbook's multi-window burn rates; the tests render the same
rules with windows of seconds (their own `RuleTiming`, tests/ruletiming.py) to watch alerts fire
in a live Prometheus. What fires, and on which labels, is the same under both timings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from opsctl.observe.promnames import ITL, TPOT, sglang

RUNBOOK = "docs/observability.md#runbook"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> int:
    match = re.fullmatch(r"(\d+)([smhd])", text)
    if not match:
        raise ValueError(f"unsupported duration {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def human_seconds(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class BurnWindow:
    """One multi-window burn-rate alert: `budget_spent` of the error budget gone in `period`.

    Both windows must burn faster than the factor that spends that share in `period`; `period`
    is the production long window, so a test that shortens `short`/`long` keeps the factor.
    """

    short: str
    long: str
    budget_spent: float
    period: str
    for_: str

    def factor(self, slo_window_seconds: int) -> float:
        return round(self.budget_spent * slo_window_seconds / duration_seconds(self.period), 6)


@dataclass(frozen=True)
class RuleTiming:
    """Windows and `for:` durations of every rule."""

    fast_burn: BurnWindow
    slow_burn: BurnWindow
    slo_slice: str  # the slice of time an SLO quantile is judged over
    server_down_for: str
    kv_cache_for: str
    kv_pressure_for: str
    errors_for: str
    errors_window: str
    smoke_failing_for: str
    smoke_stale_seconds: int
    stall_window: str  # no decode progress for this long while requests run = stalled
    stall_for: str
    restart_window: str
    crash_loop_window: str
    health_for: str
    gpu_for: str


# 2% of a 30-day budget in 1 h and 5% in 6 h page (SRE workbook, "Alerting on SLOs").
PRODUCTION_TIMING = RuleTiming(
    fast_burn=BurnWindow(short="5m", long="1h", budget_spent=0.02, period="1h", for_="2m"),
    slow_burn=BurnWindow(short="30m", long="6h", budget_spent=0.05, period="6h", for_="15m"),
    slo_slice="5m",
    server_down_for="1m",
    kv_cache_for="10m",
    kv_pressure_for="5m",
    errors_for="5m",
    errors_window="5m",
    smoke_failing_for="0s",
    smoke_stale_seconds=24 * 3600,
    stall_window="5m",
    stall_for="1m",
    restart_window="15m",
    crash_loop_window="1h",
    health_for="2m",
    gpu_for="5m",
)
def rate_sum(selector: str, by: str, window: str) -> str:
    return f"sum by ({by}) (rate({selector}[{window}]))"


def tpot_rate(suffix: str, matchers: str, by: str, window: str, on: str = "variant") -> str:
    """Per-request TPOT where sglang exports it, else per-token ITL, decided per variant.

    sglang 0.5.23 has `request_time_per_output_token_seconds`; 0.5.15 (a real server's page) has
    only `inter_token_latency_seconds`, with the same buckets. `or` keeps the TPOT series of a
    variant and takes ITL only for variants without a TPOT histogram (`unless on (<on>)`,
    so the two histograms are never mixed bucket by bucket).
    """
    tpot = rate_sum(sglang(f"{TPOT}{suffix}", matchers), by, window)
    itl = rate_sum(sglang(f"{ITL}{suffix}", matchers), by, window)
    return f"{tpot}\nor\n(\n  {itl}\n  unless on ({on})\n  {tpot}\n)"


def indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def alert(
    name: str, expr: str, for_: str, severity: str, summary: str, description: str,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One alert rule; its runbook is the section of docs/observability.md named after it."""
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, **(labels or {})},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": f"{RUNBOOK}-{name.lower()}",
        },
    }
