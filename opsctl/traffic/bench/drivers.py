"""What `bench --driver` puts in place of opsctl's own client: the whole sweep of one target.

A driver's `sweep` takes the same arguments as `opsctl.traffic.bench.sweep.sweep` and fills the same
VariantResult, so the report, the A/B table and the verdict do not depend on which one sent the
load; `workload` refuses, before any launch, what the driver cannot run; `name` is what the
report's config records. opsctl.traffic.bench.driver_sglang is the one besides opsctl's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from opsctl.core.errors import UsageError
from opsctl.traffic.bench.report import VariantResult
from opsctl.traffic.bench.workloads import Workload, WorkloadSpec
from opsctl.traffic.client import Api, ClientFactory
from opsctl.traffic.settings import BenchSettings

if TYPE_CHECKING:
    from opsctl.traffic.bench.sweep import BenchOptions, Progress

OPSCTL = "opsctl"  # opsctl's own client (opsctl.traffic.bench.sweep.sweep)
SGLANG_BENCH = "sglang-bench"  # sglang.bench_serving in the serving container
DRIVERS = (OPSCTL, SGLANG_BENCH)
# bench_serving's backend per opsctl --api: both send the OpenAI body to the path opsctl uses
# (0.5.23 benchmark/serving.py: _BACKEND_API_PATHS): /v1/completions and /v1/chat/completions.
BACKENDS: dict[Api, str] = {"completions": "sglang-oai", "chat": "sglang-oai-chat"}


def backend_name(driver: str, api: Api) -> str:
    """What a result row calls the client that measured it (bench_serving's `backend` key)."""
    return BACKENDS[api] if driver == SGLANG_BENCH else f"{OPSCTL}-{api}"


class SweepDriver(Protocol):
    name: str

    def workload(self, spec: WorkloadSpec, settings: BenchSettings) -> Workload:
        """The workload as the report records it; UsageError for what this driver cannot run
        (checked before any target is launched)."""
        ...

    async def sweep(
        self, label: str, base_url: str, options: BenchOptions, progress: Progress | None = ...,
        client_factory: ClientFactory = ..., result: VariantResult | None = ...,
    ) -> VariantResult: ...


def parse_driver(value: str) -> str:
    if value not in DRIVERS:
        raise UsageError(f"--driver {value!r}: choose one of {', '.join(DRIVERS)}",
                         hint=f"--driver {SGLANG_BENCH} runs sglang.bench_serving in the serving "
                              "container; the default is opsctl's own client")
    return value
