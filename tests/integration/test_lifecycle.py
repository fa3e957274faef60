"""`opsctl up/down/status/logs` against the real Docker engine and the simulator image.

Every fault in issue 2's list that involves the engine is exercised here for real: daemon down,
port taken, GPU request without an NVIDIA runtime, death while loading, readiness timeout.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx
import pytest
import yaml

from opsctl.core.errors import EXIT_DAEMON, EXIT_LAUNCH
from opsctl.core.paths import project_root

pytestmark = pytest.mark.docker


@pytest.fixture()
def client() -> docker.DockerClient:
    return docker.from_env()


@pytest.fixture()
def profile_factory(tmp_path: Path, client: docker.DockerClient, free_port) -> Iterator:
    """Writes a throwaway copy of deploy/sim.yaml (own name, own port) and cleans up after it."""
    names: list[str] = []

    def make(env: dict[str, str] | None = None, **container: object) -> tuple[Path, str, int]:
        data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
        name = f"it-{uuid.uuid4().hex[:8]}"
        port = free_port()
        data["name"] = name
        data["container"]["host_port"] = port
        data["container"]["env"].update(
            {"OPSCTL_SIM_LOAD_SECONDS": "1", "OPSCTL_SIM_WARMUP_SECONDS": "1"}
        )
        data["container"]["env"].update(env or {})
        data["container"].update(container)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        names.append(name)
        return path, name, port

    yield make
    for name in names:
        for container in client.containers.list(
            all=True, filters={"label": f"opsctl.profile={name}"}
        ):
            container.remove(force=True)


def containers_of(client: docker.DockerClient, name: str) -> list:
    return client.containers.list(all=True, filters={"label": f"opsctl.profile={name}"})


def test_up_status_down_on_the_simulator(opsctl, sim_image: str, profile_factory, client) -> None:
    path, name, port = profile_factory()
    up = opsctl("up", "--profile", str(path), "--variant", "gathercast", "--image", sim_image)
    assert up.returncode == 0, up.stderr
    assert "ready" in up.stdout

    models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == ["glm-5"]
    assert httpx.get(f"http://127.0.0.1:{port}/health_generate", timeout=10).status_code == 200
    (container,) = containers_of(client, name)
    labels = container.labels
    assert labels["opsctl.variant"] == "gathercast" and labels["opsctl.image"] == sim_image
    assert container.attrs["HostConfig"]["PortBindings"]["30000/tcp"][0]["HostIp"] == "127.0.0.1"
    assert container.attrs["HostConfig"]["Init"] is True

    status = opsctl("status")
    assert status.returncode == 0 and name in status.stdout and "ready" in status.stdout

    again = opsctl("up", "--profile", str(path), "--variant", "gathercast", "--image", sim_image)
    assert again.returncode == 0 and "already up" in again.stdout

    other = opsctl("up", "--profile", str(path), "--variant", "baseline", "--image", sim_image)
    assert other.returncode == EXIT_LAUNCH and "--replace" in other.stderr

    logs = opsctl("logs", "--profile", str(path), "--tail", "50")
    assert logs.returncode == 0 and logs.stdout.strip()

    down = opsctl("down", "--profile", str(path))
    assert down.returncode == 0 and name in down.stdout
    assert containers_of(client, name) == []


def test_piped_up_prints_a_line_per_start_up_phase(opsctl, sim_image: str,
                                                  profile_factory) -> None:
    """Never silent (issue 33): piped, `up` prints the phases the server's log announces."""
    path, _, _ = profile_factory(env={"OPSCTL_SIM_LOAD_SECONDS": "3",
                                      "OPSCTL_SIM_WARMUP_SECONDS": "2"})
    up = opsctl("up", "--profile", str(path), "--variant", "baseline", "--image", sim_image)
    assert up.returncode == 0, up.stderr
    for phase in ("loading weights (port closed)", "listening, warming up (",
                  "healthy and serving glm-5"):
        assert phase in up.stdout, up.stdout
    opsctl("down", "--profile", str(path))


def test_replace_swaps_the_variant(opsctl, sim_image: str, profile_factory, client) -> None:
    path, name, _ = profile_factory()
    assert (
        opsctl(
            "up", "--profile", str(path), "--variant", "baseline", "--image", sim_image
        ).returncode
        == 0
    )
    swapped = opsctl(
        "up", "--profile", str(path), "--variant", "bf16kv", "--image", sim_image, "--replace"
    )
    assert swapped.returncode == 0, swapped.stderr
    (container,) = containers_of(client, name)
    assert container.labels["opsctl.variant"] == "bf16kv"


def test_down_never_touches_foreign_containers(
    opsctl, sim_image: str, client, profile_factory
) -> None:
    # `down --profile` of this test's own profile: a bare `opsctl down` would also remove a server
    # the user left running (the quickstart's), which a test must never touch.
    path, _, _ = profile_factory()
    assert (
        opsctl(
            "up", "--profile", str(path), "--variant", "baseline", "--image", sim_image
        ).returncode
        == 0
    )
    name = f"foreign-{uuid.uuid4().hex[:6]}"
    foreign = client.containers.create(sim_image, command=["sleep", "30"], name=name)
    try:
        assert opsctl("down", "--profile", str(path)).returncode == 0
        foreign.reload()
        assert foreign.status == "created"
    finally:
        foreign.remove(force=True)


def test_server_dying_while_loading_is_exit_4_with_log_tail(
    opsctl, sim_image: str, profile_factory, client
) -> None:
    path, name, _ = profile_factory(env={"OPSCTL_SIM_FAULT": "die_while_loading"})
    result = opsctl("up", "--profile", str(path), "--image", sim_image)
    assert result.returncode == EXIT_LAUNCH
    assert "exited before it was ready" in result.stderr and "log tail" in result.stderr
    assert "Traceback (most recent call last)" not in result.stderr.split("error:")[-1]
    assert containers_of(client, name) == []


def test_readiness_timeout_is_exit_4_and_removes_the_container(
    opsctl, sim_image: str, profile_factory, client
) -> None:
    path, name, _ = profile_factory(env={"OPSCTL_SIM_LOAD_SECONDS": "120"})
    started = time.monotonic()
    result = opsctl("up", "--profile", str(path), "--image", sim_image, "--timeout", "3")
    assert result.returncode == EXIT_LAUNCH and "not ready after" in result.stderr
    assert time.monotonic() - started < 60
    assert containers_of(client, name) == []


def test_port_taken_is_exit_4_and_leaves_nothing(
    opsctl, sim_image: str, profile_factory, client
) -> None:
    path, name, port = profile_factory()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = opsctl("up", "--profile", str(path), "--image", sim_image)
    assert result.returncode == EXIT_LAUNCH and "port already taken" in result.stderr
    assert containers_of(client, name) == []


def test_gpu_request_without_nvidia_runtime_is_exit_4(
    opsctl, sim_image: str, profile_factory, client
) -> None:
    path, name, _ = profile_factory(gpus=[0])
    result = opsctl("up", "--profile", str(path), "--image", sim_image)
    assert result.returncode == EXIT_LAUNCH
    assert "cannot give GPUs [0]" in result.stderr and "NVIDIA Container Toolkit" in result.stderr
    assert containers_of(client, name) == []


def test_missing_image_is_exit_4_with_build_hint(opsctl, profile_factory) -> None:
    path, _, _ = profile_factory()
    result = opsctl("up", "--profile", str(path), "--image", "opsctl/never-built:nope")
    assert result.returncode == EXIT_LAUNCH and "opsctl build" in result.stderr


def test_daemon_down_is_exit_6_within_10_seconds(opsctl, profile_factory) -> None:
    path, _, _ = profile_factory()
    for command in (["up", "--profile", str(path), "--image", "x:y"], ["status"], ["down"]):
        started = time.monotonic()
        result = opsctl(*command, DOCKER_HOST="unix:///nonexistent/docker.sock", timeout=30)
        assert result.returncode == EXIT_DAEMON, (command, result.stderr)
        assert time.monotonic() - started < 10
        assert "Docker daemon unreachable" in result.stderr and "Traceback" not in result.stderr


def test_ctrl_c_while_loading_leaves_nothing_running(
    sim_image: str, profile_factory, client
) -> None:
    path, name, _ = profile_factory(env={"OPSCTL_SIM_LOAD_SECONDS": "120"})
    process = subprocess.Popen(
        [sys.executable, "-m", "opsctl", "up", "--profile", str(path), "--image", sim_image],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not containers_of(client, name):
        assert time.monotonic() < deadline, "the container never appeared"
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130  # interrupted, as shells report SIGINT
    assert "Traceback" not in stderr
    assert containers_of(client, name) == []
