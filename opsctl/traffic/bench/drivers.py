"""What `bench --driver` puts in place of opsctl's own client: the whole sweep of one target.

A driver (opsctl.traffic.bench.plan.SweepDriver) sweeps as `opsctl.traffic.bench.sweep.sweep`
does and fills the same VariantResult, so the report, the A/B table and the verdict do not
depend on which one sent the load; `workload` refuses, before any launch, what the driver cannot
run; `name` is what the report's config records. opsctl.traffic.bench.driver_sglang is the one
besides opsctl's own.
"""

from __future__ import annotations

from opsctl.core.errors import UsageError
from opsctl.traffic.client import Api

OPSCTL = "opsctl"  # opsctl's own client (opsctl.traffic.bench.sweep.sweep)
SGLANG_BENCH = "sglang-bench"  # sglang.bench_serving in the serving container
DRIVERS = (OPSCTL, SGLANG_BENCH)
# bench_serving's backend per opsctl --api: both send the OpenAI body to the path opsctl uses
# (0.5.23 benchmark/serving.py: _BACKEND_API_PATHS): /v1/completions and /v1/chat/completions.
BACKENDS: dict[Api, str] = {"completions": "sglang-oai", "chat": "sglang-oai-chat"}


def backend_name(driver: str, api: Api) -> str:
    """What a result row calls the client that measured it (bench_serving's `backend` key)."""
    return BACKENDS[api] if driver == SGLANG_BENCH else f"{OPSCTL}-{api}"


def parse_driver(value: str) -> str:
    if value not in DRIVERS:
        raise UsageError(f"--driver {value!r}: choose one of {', '.join(DRIVERS)}",
                         hint=f"--driver {SGLANG_BENCH} runs sglang.bench_serving in the serving "
                              "container; the default is opsctl's own client")
    return value
