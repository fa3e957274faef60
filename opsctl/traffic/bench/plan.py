"""The one plan of a bench run (`BenchOptions`): what `opsctl bench`, decide, tune and trace pass
down to the sweep, its levels and its driver. It lives below all of them, so each names it
without importing the module that runs it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from opsctl.config.profiles import Deployment
from opsctl.config.sloconfig import Slo
from opsctl.traffic.bench.arrival import Arrival, check_replay
from opsctl.traffic.bench.drivers import OPSCTL
from opsctl.traffic.bench.report import BenchConfig, VariantResult
from opsctl.traffic.bench.workloads import Workload, WorkloadSpec, build
from opsctl.traffic.client import ClientFactory
from opsctl.traffic.settings import BENCH_DEFAULTS, DEADLINE_CAP_S, MAX_DEADLINE_S, BenchSettings

# Progress callback: (variant label, concurrency, requests done, requests total).
Progress = Callable[[str, int, int, int], None]


@dataclass(frozen=True)
class BenchOptions:
    """One bench run, the one plan `opsctl bench` and decide pass down: the user's settings
    (traffic.settings.BenchSettings, the one place a knob's name, type, default and help are
    written), the targets, where the files go, and what the run resolved besides (filled in by
    traffic.app.bench before the first request)."""

    settings: BenchSettings = BENCH_DEFAULTS
    api_key: str | None = None
    # The targets: `base_urls` ([NAME=]URL), named by `variants` in order; without URLs, the
    # variants of `profile` (a name or a YAML path), each launched, swept and taken down;
    # `deployment`: launched already (decide's), judged by its profile as launched.
    profile: str | None = None
    variants: tuple[str, ...] = ()
    base_urls: tuple[str, ...] = ()
    deployment: Deployment | None = None
    out_dir: Path | None = None  # None: out/bench-<UTC time>/
    gateway: str | None = None  # push the report here; None: no push
    output_details: bool = False  # bench_serving.jsonl rows with the per-request arrays
    profile_alias: str | None = None
    slo: Slo | None = None  # --goodput's, else the profile's; goodput is judged by it
    # None: word prompts of settings.input_words, settings.output_tokens (seeded by
    # prompt_seed). A trace's workload also gives the arrival times (`arrival`).
    workload: Workload | None = None
    driver: SweepDriver | None = None  # None: opsctl's client (`sweep`)
    arrival_seed: int = 0  # of the Poisson arrivals at settings.request_rate
    temperature: float = 0.0
    prompt_seed: int = 0
    server_figures: bool = True  # sample the server's /metrics (and local GPUs) per level

    def __post_init__(self) -> None:
        # Without --deadline a trace's length is added to the capped deadline (`deadline`), up
        # to the longest --deadline accepted: a timestamp in the wrong unit is still refused.
        check_replay(self.arrival, map(self.requests_at, self.settings.concurrency),
                     self.settings.deadline_s or MAX_DEADLINE_S)

    @property
    def arrival(self) -> Arrival:
        """How requests arrive: the settings' rate and duration, the seed, and a trace's
        recorded arrival times when the workload has them."""
        return Arrival(rate=self.settings.request_rate, duration_s=self.settings.duration_s,
                       seed=self.arrival_seed,
                       schedule_s=self.workload.arrivals_s if self.workload else None)

    def work(self) -> Workload:
        return self.workload or build(WorkloadSpec(input_len=self.settings.input_words,
                                                   output_len=self.settings.output_tokens,
                                                   seed=self.prompt_seed))

    def requests_at(self, concurrency: int) -> int:
        if self.settings.requests_per_level is not None:
            return self.settings.requests_per_level
        return max(16, 4 * concurrency)

    def deadline(self) -> float:
        """Seconds one target's sweep may take: `deadline_s`, or the most its levels could take
        with every request at its timeout (a warm-up wave plus ceil(requests / c) measured
        waves per level), capped at DEADLINE_CAP_S; a trace's own arrivals (its length per
        level) come on top of the cap, so a long trace is never cut by it."""
        asked, arrival = self.settings, self.arrival
        if asked.deadline_s is not None:
            return asked.deadline_s
        if arrival.duration_s is not None:
            per_level = [2 * asked.request_timeout_s + arrival.duration_s
                         for _ in asked.concurrency]
        else:
            per_level = [(1 + math.ceil(self.requests_at(c) / c)) * asked.request_timeout_s
                         + (self.requests_at(c) / arrival.rate if arrival.rate else 0)
                         for c in asked.concurrency]
        replay = sum(arrival.replay_s(self.requests_at(c)) for c in asked.concurrency)
        return min(sum(per_level), DEADLINE_CAP_S) + replay

    def config(self) -> BenchConfig:
        """The report's record of this sweep: the settings, and what the run resolved."""
        work = self.work()
        return BenchConfig(
            settings=self.settings, sweep_deadline_s=self.deadline(),
            temperature=self.temperature, prompt_seed=self.prompt_seed,
            arrival=self.arrival.describe(), dataset_name=work.name, workload_note=work.note,
            slo_ttft_ms=self.slo.ttft.threshold_ms if self.slo and self.slo.ttft else None,
            slo_tpot_ms=self.slo.tpot.threshold_ms if self.slo and self.slo.tpot else None,
            driver=self.driver.name if self.driver else OPSCTL,
            **random_args(work),
        )


def random_args(work: Workload) -> dict[str, int | float | None]:
    """sglang.bench_serving's random_input_len / random_output_len / random_range_ratio as this
    workload states them: the lengths of a words or random workload (null where the data sets
    them: ShareGPT, shared-prefix groups), and 1.0 where every length is exact."""
    fixed = work.spec.name in ("words", "random")
    return {"random_input_len": work.spec.input_len if fixed else None,
            "random_output_len": work.spec.output_len if fixed else None,
            "random_range_ratio": work.spec.range_ratio if fixed else None}




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
