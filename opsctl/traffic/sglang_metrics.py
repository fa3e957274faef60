"""Which of sglang's own series a /metrics page carries, read from the Prometheus text format.

Smoke expects these after it has sent requests: a server launched without `--enable-metrics`,
or a router that drops them, shows up as a missing series rather than a silent gap in Grafana.
"""

from __future__ import annotations

import re

# sglang 0.5.23 series smoke expects on /metrics after it has sent requests (Appendix A of
# sglang-deployment-facts.md). Matched with either prefix: the server emits `sglang:`, the
# router rewrites it to `sglang_`.
EXPECTED_SGLANG_SERIES = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "request_time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "num_running_reqs",
    "num_requests_total",
    "generation_tokens_total",
)

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)")


def sample_names(exposition: str) -> set[str]:
    """Metric names of every sample line in a Prometheus text exposition."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line and not line.startswith("#") and (match := _SAMPLE.match(line)):
            names.add(match.group(1))
    return names


def missing_series(exposition: str) -> list[str]:
    """The expected series (base names, in order) that the exposition has no sample of."""
    present = sample_names(exposition)
    return [name for name in EXPECTED_SGLANG_SERIES if not _has_series(present, name)]


def _has_series(present: set[str], base: str) -> bool:
    for prefix in ("sglang:", "sglang_"):
        name = prefix + base
        if any(n == name or n.startswith(name + "_") for n in present):
            return True
    return False
