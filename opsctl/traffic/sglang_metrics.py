"""Which of sglang's own series a /metrics page carries, read from the Prometheus text format.

Smoke expects these after it has sent requests: a server launched without `--enable-metrics`,
or a router that drops them, shows up as a missing series rather than a silent gap in Grafana.
"""

from __future__ import annotations

import re

# Series every pinned release exports once it has served requests (0.5.15 and 0.5.23
# observability/metrics_collector.py; 0.5.15's were read off a real server,
# tests/fixtures/real-sglang-0.5.15/metrics.after-bench.txt). Matched with either prefix: the
# server emits `sglang:`, the router rewrites it to `sglang_`.
EXPECTED_SGLANG_SERIES = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "e2e_request_latency_seconds",
    "num_running_reqs",
    "num_requests_total",
    "generation_tokens_total",
)
# Series only some releases export, by the `version` their /server_info reports: the per-request
# TPOT histogram is 0.5.23's (observability/metrics_collector.py:2057-2058); 0.5.15 has none
# (a real 0.5.15 server's page has none).
SERIES_BY_RELEASE: dict[str, tuple[str, ...]] = {
    "0.5.23": ("request_time_per_output_token_seconds",),
}


def expected_series(version: str | None) -> tuple[str, ...]:
    """What a server of `version` (None or an unlisted release: the common ones) must export."""
    return EXPECTED_SGLANG_SERIES + SERIES_BY_RELEASE.get(version or "", ())

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)")


def sample_names(exposition: str) -> set[str]:
    """Metric names of every sample line in a Prometheus text exposition."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line and not line.startswith("#") and (match := _SAMPLE.match(line)):
            names.add(match.group(1))
    return names


def missing_series(exposition: str, version: str | None = None) -> list[str]:
    """The series a `version` server must export (base names, in order) that the exposition has
    no sample of."""
    present = sample_names(exposition)
    return [name for name in expected_series(version) if not _has_series(present, name)]


def _has_series(present: set[str], base: str) -> bool:
    for prefix in ("sglang:", "sglang_"):
        name = prefix + base
        if any(n == name or n.startswith(name + "_") for n in present):
            return True
    return False
