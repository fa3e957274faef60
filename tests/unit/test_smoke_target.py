"""`opsctl smoke --profile P [--variant V]`: the running container is found by label.

The Docker engine is replaced by a stand-in that answers `find` with the labels opsctl puts on
its containers; the server behind the label is the real simulator. The locator is the one the
CLI hands to the traffic app.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import SimServer

from opsctl.cli.root import Root
from opsctl.core.errors import EXIT_LAUNCH, EXIT_USAGE, LaunchError, UsageError
from opsctl.engine import dockerpy
from opsctl.engine.api import ContainerInfo
from opsctl.traffic.app import smoke_target
from opsctl.traffic.smoke import run_smoke

StartSim = Callable[..., SimServer]


class _Engine:
    def __init__(self, servers: list[ContainerInfo]) -> None:
        self.servers = servers

    def find(self, labels: dict[str, str]) -> list[ContainerInfo]:
        return [s for s in self.servers if all(s.labels.get(k) == v for k, v in labels.items())]


def _server(url: str, variant: str, status: str = "running") -> ContainerInfo:
    labels = {"opsctl.profile": "sim", "opsctl.role": "server", "opsctl.variant": variant,
              "opsctl.base-url": url}
    return ContainerInfo(id="c1", name="opsctl-sim", status=status, exit_code=None,
                         labels=labels, image="opsctl/sim:x", started_at="")


def _use(monkeypatch: pytest.MonkeyPatch, engine: _Engine) -> None:
    monkeypatch.setattr(dockerpy, "connect", lambda timeout=0: engine)


def test_running_container_is_found_by_label_and_smoked(
    sim_server: StartSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = sim_server(env={"OPSCTL_SIM_ITL_MS": "2", "OPSCTL_SIM_TTFT_MS": "5"},
                     args=["--served-model-name", "glm-5", "--enable-metrics"])
    _use(monkeypatch, _Engine([_server(sim.url, "gathercast")]))
    target = smoke_target("sim", None, None, Root().locate_server)
    assert (target.base_url, target.profile, target.variant) == (sim.url, "sim", "gathercast")
    assert target.profile_alias == "glm-5"
    assert target.slo is not None and target.slo.tpot is not None  # the profile's SLO travels
    report = run_smoke(target)  # the target is the plan: the checks run as resolved
    assert report.passed, report.checks
    assert report.check("slo").status == "pass"  # type: ignore[union-attr]


def test_another_variant_running_says_which_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, _Engine([_server("http://127.0.0.1:1", "baseline")]))
    with pytest.raises(UsageError) as caught:
        smoke_target("sim", "gathercast", None, Root().locate_server)
    assert caught.value.exit_code == EXIT_USAGE
    assert "runs variant 'baseline'" in caught.value.message
    assert "--variant gathercast" in caught.value.hint


def test_nothing_running_is_a_launch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, _Engine([_server("http://127.0.0.1:1", "baseline", status="exited")]))
    with pytest.raises(LaunchError) as caught:
        smoke_target("sim", None, None, Root().locate_server)
    assert caught.value.exit_code == EXIT_LAUNCH


def test_base_url_needs_no_locator() -> None:
    def refuse(profile_name: str) -> tuple[str, str | None]:
        raise AssertionError("nothing to locate with --base-url")

    bare = smoke_target(None, None, "http://127.0.0.1:9", refuse)
    assert (bare.profile, bare.profile_alias, bare.slo) == (None, None, None)
    assert smoke_target(None, "gathercast", "http://127.0.0.1:9", refuse).variant == \
        "gathercast"
    with_profile = smoke_target("sim", "baseline", "http://127.0.0.1:9", refuse)
    assert (with_profile.profile, with_profile.variant) == ("sim", "baseline")
    assert with_profile.profile_alias == "glm-5"
    with pytest.raises(UsageError):
        smoke_target("sim", "no-such-variant", "http://127.0.0.1:9", refuse)
