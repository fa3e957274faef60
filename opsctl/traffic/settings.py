"""The settings of `smoke` and `bench`, one model each, their defaults written here only.

The CLI's option defaults, the gate's and decide's smoke, decide's sweep, `tune`'s bench and
the runtime options (SmokeOptions; BenchOptions holds its BenchSettings) all read them from
these models, and each report records the settings it ran with (SmokeReport.settings,
BenchReport.config.settings).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from opsctl.traffic.client import Api

# bench's concurrency levels when --concurrency is not given.
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SmokeSettings(_Settings):
    """What smoke sends and how long it waits (`opsctl smoke`, `up --gate`, `decide`)."""

    api: Api = "completions"
    model: str | None = None  # --model; None: the profile's alias, or the only listed name
    request_timeout_s: float = 120.0
    overall_timeout_s: float = 600.0  # the checks (readiness ... compare)
    # Each eval asked for (GSM8K, the long-context probes, lm-eval) runs after the checks with
    # a budget of its own: on GLM-5 one eval takes minutes, and two sharing the checks' budget
    # left the second one failed for time.
    eval_timeout_s: float = 3600.0


class BenchSettings(_Settings):
    """What a sweep sends at each level (`opsctl bench`, decide's sweep, `tune`'s points)."""

    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    requests_per_level: int | None = None  # None: max(16, 4 x concurrency)
    input_words: int = 256
    output_tokens: int = 256
    api: Api = "completions"
    model: str | None = None  # --model; None: the profile's alias, or the only listed name
    request_timeout_s: float = 600.0
    deadline_s: float | None = None  # each target's sweep; None: derived (BenchOptions)
    ignore_eos: bool = True  # False for servers that refuse the extension
    request_rate: float | None = None  # Poisson arrivals per second; None: closed loop
    duration_s: float | None = None  # seconds per level instead of a request count
    client_workers: int | None = None  # client processes per level; None: automatic
    saturation_gain: float | None = Field(
        None, ge=0, le=1, description="Stop the sweep after a level whose output throughput "
        "rose by less than this share over the previous level's while its E2E p50 rose by "
        "more (saturated: more concurrency only queues); None: never.")
    max_error_rate: float | None = Field(
        None, ge=0, le=1, description="Stop the sweep after a level whose failed share of its "
        "requests (measured and warm-up) is above this; None: never.")


SMOKE_DEFAULTS = SmokeSettings()
BENCH_DEFAULTS = BenchSettings()
