"""The alert rules' timing for the tests: the production rules with windows of seconds, for a
live Prometheus scraping every second. Alert semantics (what fires, on which labels) are those of
opsctl.observe.promexpr.PRODUCTION_TIMING; only the windows shrink. Not shipped in the package."""

from __future__ import annotations

from opsctl.observe.alertmanager import Timing
from opsctl.observe.promexpr import BurnWindow, RuleTiming

TEST_TIMING = RuleTiming(
    fast_burn=BurnWindow(short="10s", long="30s", budget_spent=0.02, period="1h", for_="0s"),
    slow_burn=BurnWindow(short="20s", long="60s", budget_spent=0.05, period="6h", for_="0s"),
    slo_slice="10s",
    server_down_for="0s",
    kv_cache_for="0s",
    kv_pressure_for="0s",
    errors_for="0s",
    errors_window="15s",
    smoke_failing_for="0s",
    smoke_stale_seconds=3600,
    stall_window="10s",
    stall_for="3s",  # at least two 1 s scrapes: a counter seen once has no increase yet
    restart_window="30s",
    crash_loop_window="60s",
    health_for="0s",
    gpu_for="0s",
)

# Alertmanager's grouping and repeat timing for the tests: notify at once.
ALERTMANAGER_TEST_TIMING = Timing("1s", "1s", "1h", "1h")
