"""The readiness probe against the simulator over real HTTP, phase by phase."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx

from opsctl.deploy.app import uptime
from opsctl.deploy.readiness import Phase, probe
from opsctl.engine.api import ContainerInfo


def test_port_closed_is_loading(sim_server) -> None:
    server = sim_server(env={"OPSCTL_SIM_LOAD_SECONDS": "30"}, wait="none")
    with httpx.Client() as client:
        assert probe(client, server.url, "glm-5").phase is Phase.LOADING


def test_503_is_warming_then_ready(sim_server) -> None:
    server = sim_server(env={"OPSCTL_SIM_WARMUP_SECONDS": "2"},
                        args=["--served-model-name", "glm-5"], wait="listen")
    with httpx.Client() as client:
        first = probe(client, server.url, "glm-5")
        assert first.phase is Phase.WARMING and "503" in first.detail
        deadline = time.monotonic() + 20
        while probe(client, server.url, "glm-5").phase is not Phase.READY:
            assert time.monotonic() < deadline, "simulator never became ready"
            time.sleep(0.2)


def test_ready_needs_the_served_name_listed(sim_server) -> None:
    server = sim_server(args=["--served-model-name", "glm-5"])
    with httpx.Client() as client:
        assert probe(client, server.url, "glm-5").phase is Phase.READY
        wrong = probe(client, server.url, "glm-5.1")
        assert wrong.phase is Phase.WARMING and "glm-5.1" in wrong.detail


def test_uptime_is_formatted_from_docker_timestamps() -> None:
    info = ContainerInfo(id="x", name="n", status="running", exit_code=None, labels={}, image="i",
                         started_at="2026-11-29T10:00:00.123456789Z")
    assert uptime(info, now=datetime(2026, 11, 29, 11, 2, 3, tzinfo=UTC)) == "1h02m02s"
    assert uptime(ContainerInfo("x", "n", "exited", 1, {}, "i", ""), now=datetime.now(UTC)) == "-"
