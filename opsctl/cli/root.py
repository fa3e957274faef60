"""The composition root: one `Root` per command, built in `cli/`, holding every collaborator the
rooms get from outside themselves.

The engine (connected on first use, then kept: one connection per command), the state
directory, the clock, how the image is named (`--image`, else the tag `opsctl build` makes),
the verify room's check, the HTTP client factories (readiness and the traffic client) and the
metrics push. `launch()` is the one verified, locked launch (deploy.launch.Launch) that `up`,
`up --gate`, `decide`, `tune` and `bench --variants` start servers through; `traffic()` is what
the traffic room's smoke and bench take from outside it, which the gate and decide call directly.
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import TYPE_CHECKING, Any

from opsctl.core.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    import httpx

    from opsctl.config.profiles import Deployment, Profile
    from opsctl.deploy.launch import Launch, VariantLauncher
    from opsctl.deploy.state import StateDir
    from opsctl.engine.api import Engine
    from opsctl.traffic.app import LocatedServer, Traffic
    from opsctl.traffic.bench.driver_sglang import ServingContainer
    from opsctl.traffic.client import ClientFactory
    from opsctl.verify.app import VerifyResult

PUSHGATEWAY_ENV = "OPSCTL_PUSHGATEWAY"


def gateway_from(pushgateway: str | None) -> str | None:
    """--pushgateway or $OPSCTL_PUSHGATEWAY, checked as a URL before any work (exit 2; a bad
    one was an http.client.InvalidURL traceback after the run)."""
    from opsctl.core.httpcap import checked_base_url

    gateway = pushgateway or os.environ.get(PUSHGATEWAY_ENV)
    if gateway:
        checked_base_url(gateway, "--pushgateway" if pushgateway else f"${PUSHGATEWAY_ENV}")
    return gateway or None


def verify_server(deployment: Deployment, base_url: str, log_text: str) -> VerifyResult:
    """The verify room's check of a ready server against the variant's flags and its `expect`
    (the API key from $OPSCTL_API_KEY)."""
    from opsctl.core.httpcap import capped_client
    from opsctl.core.redact import api_key_from_env, auth_headers
    from opsctl.verify.app import run_verify

    with capped_client(headers=auth_headers(api_key_from_env()), base_url=base_url) as client:
        return run_verify(deployment, client, log_text=log_text, expect=deployment.expect)


class Root:
    """Built once per command; nothing is connected or created until a command asks for it."""

    clock: Clock = SYSTEM_CLOCK

    def __init__(self, image: str | None = None) -> None:
        self.image = image  # --image; None: the image `opsctl build` made for each variant

    # --- the collaborators -------------------------------------------------------------------

    @cached_property
    def engine(self) -> Engine:
        """The container engine, connected on first use and then kept."""
        from opsctl.engine import dockerpy

        return dockerpy.connect()

    @cached_property
    def state(self) -> StateDir:
        from opsctl.deploy.state import StateDir

        return StateDir.default()

    def image_for(self, deployment: Deployment) -> str:
        """`--image` as given, else the tag `opsctl build` makes for the profile."""
        if self.image:
            return self.image
        from opsctl.image.plan import expected_image

        return expected_image(deployment)

    verify = staticmethod(verify_server)

    @staticmethod
    def http() -> httpx.Client:
        """The HTTP client readiness polls with."""
        from opsctl.deploy import readiness

        return readiness.http_client()

    @property
    def client_factory(self) -> ClientFactory:
        """The traffic room's OpenAI-compatible client factory."""
        from opsctl.traffic.client import make_client

        return make_client

    @staticmethod
    def push(kind: str, record: dict[str, Any], gateway: str) -> None:
        """The observe room's metrics push (raises OpsctlError when it fails)."""
        from opsctl.observe.metrics import push_report

        push_report(kind, record, gateway)

    # --- what the rooms are given ------------------------------------------------------------

    def launch(self, *, verify: bool = True, preflight: bool = True) -> Launch:
        """The one verified, locked launch (verify=False only for `up --no-verify`)."""
        from opsctl.deploy.launch import Launch
        from opsctl.deploy.preflight import run_preflight

        return Launch(engine=self.engine, image_for=self.image_for,
                      verify=self.verify if verify else None, state=self.state, http=self.http,
                      clock=self.clock, preflight=run_preflight if preflight else None)

    def variant_launcher(self, profile: Profile) -> VariantLauncher:
        """`bench --variants`' launcher, through the same launch as `up`."""
        from opsctl.deploy.launch import VariantLauncher

        return VariantLauncher(profile, self.launch())

    def locate_server(self, profile_name: str) -> LocatedServer:
        """The profile's running server, found by label: its base URL, the variant it runs and
        the checkpoint `up` recorded on it (so smoke can warn when compared reports differ)."""
        from opsctl.core import labels
        from opsctl.deploy import app as deploy_app
        from opsctl.traffic.app import LocatedServer

        url = deploy_app.base_url_for(self.engine, profile_name)  # LaunchError when none runs
        servers = [s for s in deploy_app.find_servers(self.engine, profile_name)
                   if s.status == "running"]
        if not servers:
            return LocatedServer(url, None)
        return LocatedServer(url, servers[0].labels.get(labels.VARIANT),
                             deploy_app.checkpoint_of(servers[0]))

    def serving_container(self, base_url: str) -> ServingContainer:
        """The opsctl container serving `base_url` (by label and published port), with commands
        run in it through the engine: `bench --driver sglang-bench`'s collaborator."""
        from opsctl.deploy.urlserver import server_for_url
        from opsctl.traffic.bench.driver_sglang import ServingContainer

        engine = self.engine
        info, inner_url = server_for_url(engine, base_url)
        return ServingContainer(
            name=info.name, inner_url=inner_url,
            run=lambda command, env, timeout_s, max_bytes: engine.exec(
                info.id, command, env=env, timeout_seconds=timeout_s, max_output_bytes=max_bytes))

    def traffic(self) -> Traffic:
        """The traffic room's smoke and bench as the gate and decide call them: the API key
        from $OPSCTL_API_KEY, the client factory, the push, the pinned eval datasets, the
        plots and the progress views on the CLI's consoles."""
        from opsctl.cli.app import console, err_console
        from opsctl.core.redact import api_key_from_env
        from opsctl.traffic import view
        from opsctl.traffic.app import Traffic
        from opsctl.traffic.evals.dataset import load_gsm8k

        return Traffic(api_key=api_key_from_env(), client_factory=self.client_factory,
                       push=self.push, load_dataset=load_gsm8k, plot=view.write_plots,
                       progress=lambda: view.live_progress(console),
                       eval_progress=view.eval_progress(err_console))
