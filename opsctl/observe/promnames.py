"""sglang's metric names, its latency buckets and the SLO thresholds that must sit on their edges.

Every sglang selector matches both spellings of the prefix, `sglang:` (what the server emits)
and `sglang_` (what sgl-router's /engine_metrics rewrites it to), with a `__name__` regex.
Metric names, types and labels are read from the sglang sources opsctl pins: 0.5.23
(sglang/srt/observability/metrics_collector.py, http_request_metrics.py), and checked against a
real 0.5.15 server's page (tests/fixtures/real-sglang-0.5.15/). Every series used here exists in
both, except the per-request TPOT histogram, which 0.5.15 lacks: TPOT records fall back to
per-token ITL there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opsctl.core.errors import ProfileError

if TYPE_CHECKING:
    from opsctl.config.profiles import Profile

# sglang's default ITL/TPOT buckets, identical in 0.5.23 (observability/metrics_collector.py,
# TokenizerMetricsCollector) and on a real 0.5.15 server's page;
# `--bucket-inter-token-latency` replaces them. A burn-rate rule needs a bucket edge exactly
# at the TPOT SLO, so the SLO must be one of these (or of the profile's override).
SGLANG_ITL_BUCKETS: tuple[float, ...] = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
    0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)
BUCKET_FLAG = "--bucket-inter-token-latency"
# sglang's default TTFT buckets, identical in 0.5.23 and 0.5.15 (as above); replaced by
# `--bucket-time-to-first-token`.
SGLANG_TTFT_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
    200.0, 400.0,
)
TTFT_BUCKET_FLAG = "--bucket-time-to-first-token"

QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
# The window of rate() in recording rules; fixed so that dashboards can name the records.
RATE_WINDOW = "5m"
TPOT = "request_time_per_output_token_seconds"
ITL = "inter_token_latency_seconds"


def sglang(name: str, matchers: str = "") -> str:
    """A selector for an sglang series under either prefix, e.g. sglang("num_running_reqs")."""
    extra = f", {matchers}" if matchers else ""
    return f'{{__name__=~"sglang[:_]{name}"{extra}}}'


@dataclass(frozen=True)
class SloRule:
    """One profile objective as the rules read it: its histogram, bucket edge and budget."""

    name: str  # "tpot" or "ttft"
    threshold_seconds: float
    quantile: float
    target: float
    window_seconds: int

    @property
    def le(self) -> str:
        # prometheus_client writes bucket bounds with Python's repr of the float ("0.08", "2.0").
        return repr(float(self.threshold_seconds))

    @property
    def label(self) -> str:
        return self.name.upper()


def _flag_values(args: list[str], flag: str) -> tuple[float, ...] | None:
    for index, arg in enumerate(args):
        if arg == flag:
            values: list[str] = []
            for value in args[index + 1:]:
                if value.startswith("--"):
                    break
                values.append(value)
            return tuple(float(v) for v in values)
        if arg.startswith(flag + "="):
            return tuple(float(v) for v in re.split(r"[ ,]+", arg.split("=", 1)[1]) if v)
    return None


def itl_buckets(profile: Profile) -> tuple[float, ...]:
    """The ITL/TPOT buckets the profile's server will use: its override, else sglang's default."""
    return _flag_values(profile.server.extra_args, BUCKET_FLAG) or SGLANG_ITL_BUCKETS


def ttft_buckets(profile: Profile) -> tuple[float, ...]:
    return _flag_values(profile.server.extra_args, TTFT_BUCKET_FLAG) or SGLANG_TTFT_BUCKETS


def slo_rules(profile: Profile) -> tuple[SloRule, ...]:
    """The profile's objectives as rule inputs; each threshold must sit on a bucket edge.

    A profile without objectives gets no SLO rules (the other alerts do not need one).
    """
    found = []
    for name, objective, buckets, flag in (
        ("tpot", profile.slo.tpot, itl_buckets(profile), BUCKET_FLAG),
        ("ttft", profile.slo.ttft, ttft_buckets(profile), TTFT_BUCKET_FLAG),
    ):
        if objective is None:
            continue
        threshold = objective.threshold_seconds
        if not any(abs(edge - threshold) < 1e-9 for edge in buckets):
            raise ProfileError(
                f"profile {profile.name!r}: slo.{name}.threshold_ms {objective.threshold_ms:g} is "
                f"not an edge of the {name.upper()} histogram buckets "
                f"({', '.join(f'{b * 1000:g}' for b in buckets)} ms)",
                hint=f"pick a threshold on a bucket edge, or add `{flag} ...` including it to "
                "server.extra_args",
            )
        found.append(SloRule(name, threshold, objective.quantile, objective.target,
                             objective.window_seconds))
    return tuple(found)
