"""The real PointRunner: the deploy room's launch (`up`/`down`, verified, locked) and the
traffic room's bench, through their public functions; the launch and the client factory come
from the CLI's composition root.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsctl.config.profiles import Deployment
from opsctl.core.errors import Interrupted
from opsctl.deploy.launch import Launch
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.client import ClientFactory, make_client
from opsctl.traffic.settings import BenchSettings
from opsctl.tune.app import Measure
from opsctl.tune.settings import TuneSettings

LABEL = "tune"


@dataclass
class DeployRunner:
    launch: Launch
    settings: TuneSettings  # each point's prompt, output and request timeout
    api_key: str | None
    client_factory: ClientFactory = make_client

    def up(self, deployment: Deployment) -> str:
        """Stop what runs for the profile, start this point, wait until ready and verified."""
        started = self.launch.up(deployment, replace=True)
        return started.base_url

    def bench(self, deployment: Deployment, base_url: str, concurrency: int,
              requests: int) -> Measure:
        """One level against the point just launched, with its profile as launched (the model
        alias, the SLO): nothing is read from the profile file again."""
        asked = self.settings
        profile = deployment.profile
        options = BenchOptions(
            BenchSettings(
                concurrency=(concurrency,),
                requests_per_level=requests,
                input_words=asked.input_words,
                output_tokens=asked.output_tokens,
                request_timeout_s=asked.request_timeout_s,
            ),
            api_key=self.api_key,
            profile_alias=profile.model.served_name,
            slo=profile.slo,
        )
        report = run_bench([Target(label=LABEL, base_url=base_url)], options,
                           client_factory=self.client_factory)
        stopped = report.stop_error("bench", "tune")
        if isinstance(stopped, Interrupted):
            raise KeyboardInterrupt  # the search saves its state and exits 130
        if stopped is not None:
            raise stopped
        result = report.variants[0]
        level = result.levels[0] if result.levels else None
        error = result.error or result.stopped or (level.aborted if level else "no level ran")
        failed = result.failed_requests
        if error is None and failed:
            error = f"{failed} request(s) failed"
        return Measure(
            tpot_p50_ms=level.tpot_ms.p50 if level else None,
            ttft_p50_ms=level.ttft_ms.p50 if level else None,
            output_tokens_per_s=level.output_tokens_per_s if level else None,
            failed_requests=failed, error=error)

    def down(self, deployment: Deployment) -> None:
        self.launch.down(deployment.profile.name)
