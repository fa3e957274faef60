"""The server heals, its logs survive, and `up` owns what it creates: on the real Docker engine
with the simulator image, with faults injected by tests/dockerproxy.py between opsctl and the
daemon (dropped, hung, slow and vanished daemons at chosen API calls), concurrent runs, and real
SIGINTs.

opsctl runs as a user runs it (a subprocess), in a temporary working directory (its out/logs/)
with its own state directory; containers are inspected and cleaned up over the real socket.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import httpx
import pytest
import yaml
from dockerproxy import DockerProxy, Fault

from opsctl.config.profiles import load_profile
from opsctl.config.runspec import run_spec
from opsctl.core.errors import EXIT_DAEMON, EXIT_INTERRUPTED, EXIT_LAUNCH
from opsctl.core.paths import project_root
from opsctl.deploy import app
from opsctl.engine.dockerpy import connect

pytestmark = pytest.mark.docker

CREATE = r"^/containers/create$"
INSPECT = r"^/containers/[0-9a-f]+/json$"
# The SDK's create and opsctl's run each inspect once: the third inspect is the readiness wait's.
WAITING = 3
STOP = r"^/containers/[0-9a-f]+/stop$"
DELETE = r"^/containers/[0-9a-f]+$"

def traceback_in(stderr: str) -> bool:
    """opsctl's own traceback (the server's log lines it quotes are indented)."""
    return any(line.startswith("Traceback (most recent call last)") for line in stderr.splitlines())


class Box:
    """A throwaway copy of deploy/sim.yaml (own name, port, fast load, a 1 s health check), a
    working directory for out/logs and a state directory."""

    def __init__(self, root: Path, port: int, image: str, env: dict[str, str],
                 container: dict[str, object]) -> None:
        data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
        self.name = f"it-{uuid.uuid4().hex[:8]}"
        self.port, self.image, self.root = port, image, root
        data["name"] = self.name
        data["container"].update({"host_port": port, "health_interval_seconds": 1,
                                  "health_retries": 1, **container})
        data["container"]["env"].update({"OPSCTL_SIM_LOAD_SECONDS": "1",
                                         "OPSCTL_SIM_WARMUP_SECONDS": "1", **env})
        self.profile = root / f"{self.name}.yaml"
        self.profile.write_text(yaml.safe_dump(data))
        self.state = root / "state"
        self.logs = root / "out" / "logs"

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "opsctl", *args]

    def env(self, docker_host: str | None, state: Path | None) -> dict[str, str]:
        env = {**os.environ, "OPSCTL_STATE_DIR": str(state or self.state)}
        if docker_host:
            env["DOCKER_HOST"] = docker_host
        return env

    def run(self, *args: str, docker_host: str | None = None, state: Path | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), capture_output=True, text=True, cwd=self.root,
                              env=self.env(docker_host, state), timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def start(self, *args: str, docker_host: str | None = None,
              state: Path | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(*args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=self.root,
                                env=self.env(docker_host, state), stdin=subprocess.DEVNULL)

    def up(self, *extra: str, **options: object) -> subprocess.CompletedProcess[str]:
        return self.run("up", "--profile", str(self.profile), "--image", self.image,
                        "--no-verify", *extra, **options)  # type: ignore[arg-type]

    def containers(self) -> list[docker.models.containers.Container]:
        return docker.from_env().containers.list(
            all=True, filters={"label": f"opsctl.profile={self.name}"})

    def saved(self) -> list[Path]:
        return sorted(self.logs.glob("*.log")) if self.logs.is_dir() else []


@pytest.fixture()
def box_factory(
    tmp_path: Path, sim_image: str, free_port: Callable[[], int]
) -> Iterator[Callable[..., Box]]:
    made: list[Box] = []

    def make(env: dict[str, str] | None = None, **container: object) -> Box:
        box = Box(tmp_path / f"box{len(made)}", free_port(), sim_image, env or {}, container)
        made.append(box)
        return box

    for directory in (tmp_path / f"box{i}" for i in range(4)):
        directory.mkdir()
    yield make
    for box in made:
        for container in box.containers():
            container.remove(force=True)


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The `error:` line of a run that exited `code` without a traceback."""
    assert result.returncode == code, result.stdout + result.stderr
    assert not traceback_in(result.stderr), result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    return line


def wait_for(condition: Callable[[], object], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


# --- the server heals, logs survive (no faults) -------------------------------------------------


def test_a_failed_up_and_a_down_leave_the_saved_log(box_factory: Callable[..., Box]) -> None:
    box = box_factory(env={"OPSCTL_SIM_FAULT": "die_while_loading", "OPSCTL_SIM_LOAD_SECONDS": "2"})
    failed = box.up()
    assert "container removed: opsctl-" in one_line_error(failed, EXIT_LAUNCH)
    (first,) = box.saved()
    text = first.read_text()
    assert first.name.startswith(f"{box.name}-gathercast-") and "# exit code: " in text
    assert "# reason: `opsctl up` failed: server exited before it was ready (exit code 1)" in text
    assert "out of memory" in text.lower() and box.containers() == []

    healthy = box_factory()
    assert healthy.up().returncode == 0
    (container,) = healthy.containers()
    host = container.attrs["HostConfig"]
    assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert host["LogConfig"] == {
        "Type": "json-file",
        "Config": {"max-size": "100m", "max-file": "5"},
    }
    assert container.attrs["Config"]["Healthcheck"]["Test"][0] == "CMD-SHELL"
    wait_for(
        lambda: container.reload() or container.attrs["State"]["Health"]["Status"] == "healthy",
        60,
        "the health check to pass in the simulator image",
    )
    row = next(line for line in healthy.run("status").stdout.splitlines() if healthy.name in line)
    assert "healthy" in row and "0 of 3" in row

    down = healthy.run("down", "--profile", str(healthy.profile))
    assert down.returncode == 0 and "log saved:" in down.stdout, down.stderr
    (second,) = healthy.saved()
    assert "# reason: `opsctl down`" in second.read_text() and healthy.containers() == []


def test_status_says_unhealthy_and_crash_loop(box_factory: Callable[..., Box]) -> None:
    box = box_factory(env={"SGLANG_HEALTH_CHECK_TIMEOUT": "1"})
    assert box.up().returncode == 0
    httpx.post(f"http://127.0.0.1:{box.port}/_sim/config", json={"fault": "hang"}, timeout=5)
    (container,) = box.containers()
    wait_for(
        lambda: container.reload() or container.attrs["State"]["Health"]["Status"] == "unhealthy",
        60,
        "the health check to fail",
    )
    row = next(line for line in box.run("status").stdout.splitlines() if box.name in line)
    assert "unhealthy" in row

    crashing = box_factory()
    engine = connect()
    spec = run_spec(load_profile(str(crashing.profile)).resolve(), crashing.image)
    engine.run(dataclasses.replace(spec, command=["sh", "-c", "exit 3"], restart_max=2))
    (looping,) = crashing.containers()
    wait_for(
        lambda: (
            looping.reload() or (looping.status == "exited" and looping.attrs["RestartCount"] == 2)
        ),
        60,
        "a crash loop",
    )
    (found,) = [row for row in app.status(engine) if row.profile == crashing.name]
    assert (found.crash_loop, found.restarts) == ("crash loop: gave up after 2 restarts", "2 of 2")
    assert found.last_exit.startswith("3 at ") and found.readiness == "exited (exit 3)"
    assert "crash loop" in crashing.run("status").stdout


# --- the daemon dies, hangs or drops a call (the proxy) ------------------------------------------


@pytest.mark.parametrize(
    "fault, code, left",
    [
        (Fault("POST", CREATE, "drop_response"), EXIT_DAEMON, "created on the daemon, answer lost"),
        (Fault("POST", CREATE, "drop"), EXIT_DAEMON, "never created"),
        (Fault("GET", INSPECT, "drop", nth=2), EXIT_DAEMON, "dropped right after the start"),
        (
            Fault("GET", INSPECT, "drop", nth=WAITING),
            EXIT_DAEMON,
            "dropped while waiting for readiness",
        ),
        (
            Fault("GET", INSPECT, "blackhole", nth=WAITING),
            EXIT_DAEMON,
            "hung while waiting for readiness",
        ),
        (
            Fault("GET", INSPECT, "down", nth=WAITING, seconds=6),
            EXIT_DAEMON,
            "away for 6 s, then back",
        ),
        (Fault("POST", r"^/containers/[0-9a-f]+/start$", "drop"), EXIT_DAEMON, "dropped at start"),
    ],
)
def test_a_daemon_fault_mid_up_is_exit_6_in_one_line_and_leaves_nothing(
    box_factory: Callable[..., Box], fault: Fault, code: int, left: str
) -> None:
    box = box_factory(env={"OPSCTL_SIM_LOAD_SECONDS": "4"})
    with DockerProxy([fault], max_seconds=60) as proxy:
        started = time.monotonic()
        result = box.up(docker_host=proxy.docker_host)
        took = time.monotonic() - started
    line = one_line_error(result, code)
    assert "Docker engine" in line, line
    assert took < 90, took
    assert [call for call in proxy.seen if call[2] == fault.action], proxy.seen
    assert box.containers() == [], (left, result.stderr)


def test_a_daemon_that_stays_away_is_named_with_what_is_left(
    box_factory: Callable[..., Box],
) -> None:
    box = box_factory(env={"OPSCTL_SIM_LOAD_SECONDS": "30"})
    with DockerProxy([Fault("GET", INSPECT, "down", nth=WAITING, seconds=300)],
                     max_seconds=60) as proxy:
        result = box.up(docker_host=proxy.docker_host)
    line = one_line_error(result, EXIT_DAEMON)
    (container,) = box.containers()
    assert (
        f"left behind: {container.name} ({container.id[:12]}), the engine did not answer" in line
    ), line
    assert f"`opsctl down --profile {box.name}` removes it once the engine answers" in line


def test_removal_cut_off_by_the_daemon_keeps_the_log_and_down_finishes_later(
    box_factory: Callable[..., Box]
) -> None:
    box = box_factory()
    assert box.up().returncode == 0
    with DockerProxy([Fault("DELETE", DELETE, "drop")], max_seconds=60) as proxy:
        cut = box.run("down", "--profile", str(box.profile), docker_host=proxy.docker_host)
    assert "Docker engine" in one_line_error(cut, EXIT_DAEMON)
    assert len(box.saved()) == 1 and len(box.containers()) == 1  # saved, stopped, not removed
    again = box.run("down", "--profile", str(box.profile))
    assert again.returncode == 0 and box.containers() == [] and len(box.saved()) == 2


def test_a_stop_dropped_during_cleanup_is_retried(box_factory: Callable[..., Box]) -> None:
    box = box_factory(env={"OPSCTL_SIM_LOAD_SECONDS": "60"})
    with DockerProxy([Fault("POST", STOP, "drop")], max_seconds=60) as proxy:
        result = box.up("--timeout", "2", docker_host=proxy.docker_host)
    line = one_line_error(result, EXIT_LAUNCH)
    assert "not ready after 2 s" in line and "container removed" in line
    assert "trying again" in result.stderr and box.containers() == []


# --- ownership: concurrent runs, Ctrl-C ---------------------------------------------------------


def test_a_second_up_of_a_busy_profile_is_refused_at_once(box_factory: Callable[..., Box]) -> None:
    box = box_factory(env={"OPSCTL_SIM_LOAD_SECONDS": "5"})
    first = box.start("up", "--profile", str(box.profile), "--image", box.image, "--no-verify")
    wait_for(box.containers, 60, "the first run's container")
    busy = box.up()
    assert "is busy: `opsctl up` (pid" in one_line_error(busy, EXIT_LAUNCH)
    down = box.run("down", "--profile", str(box.profile))
    assert "is busy" in one_line_error(down, EXIT_LAUNCH)
    _, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    (container,) = box.containers()
    assert container.status == "running"


def test_a_run_that_loses_the_race_never_removes_the_winner(box_factory: Callable[..., Box],
                                                            tmp_path: Path) -> None:
    """Two state directories (no shared lock): the loser's create reaches the daemon after the
    winner's; its cleanup looks for its own run id only."""
    box = box_factory(env={"OPSCTL_SIM_LOAD_SECONDS": "3"})
    with DockerProxy([Fault("POST", CREATE, "stall", seconds=8)], max_seconds=60) as proxy:
        loser = box.start("up", "--profile", str(box.profile), "--image", box.image,
                          "--no-verify", docker_host=proxy.docker_host, state=tmp_path / "other")
        wait_for(lambda: proxy.calls("POST", CREATE), 60, "the loser's create")
        winner = box.up()
        _, stderr = loser.communicate(timeout=60)
    assert winner.returncode == 0, winner.stderr
    assert loser.returncode == EXIT_LAUNCH and "already exists" in stderr, stderr
    (container,) = box.containers()
    assert container.status == "running" and box.saved() == []


def test_a_second_ctrl_c_leaves_it_running_and_names_it(box_factory: Callable[..., Box]) -> None:
    box = box_factory(env={"OPSCTL_SIM_LOAD_SECONDS": "120"})
    with DockerProxy([Fault("POST", STOP, "blackhole")], max_seconds=60) as proxy:
        run = box.start("up", "--profile", str(box.profile), "--image", box.image,
                        docker_host=proxy.docker_host)
        # Running: `up` has its create's answer (a Ctrl-C still inside the create removes what
        # the daemon made without a stop, and this test would wait for one in vain).
        wait_for(lambda: [c for c in box.containers() if c.status == "running"], 60,
                 "the container to run")
        run.send_signal(signal.SIGINT)
        wait_for(lambda: proxy.calls("POST", STOP), 30, "the cleanup's stop")
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=60)
    assert run.returncode == EXIT_INTERRUPTED and not traceback_in(stderr)
    assert "Ctrl-C again to leave it running" in stderr
    (container,) = box.containers()
    assert f"left as it is (Ctrl-C again): {container.name} ({container.id[:12]})" in stderr
    assert container.status == "running"


@pytest.mark.parametrize("answer_after", [3.0, 15.0])  # within and beyond the client's timeout
def test_ctrl_c_while_the_daemon_creates_leaves_no_created_container(
    box_factory: Callable[..., Box], answer_after: float
) -> None:
    box = box_factory()
    with DockerProxy(
        [Fault("POST", CREATE, "delay", seconds=answer_after)], max_seconds=60
    ) as proxy:
        run = box.start("up", "--profile", str(box.profile), "--image", box.image,
                        docker_host=proxy.docker_host)
        wait_for(lambda: proxy.calls("POST", CREATE), 60, "the create call")
        wait_for(box.containers, 30, "the daemon to create it")  # created; the answer is held
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=90)
    assert run.returncode == EXIT_INTERRUPTED and not traceback_in(stderr)
    assert box.containers() == [], json.dumps(proxy.seen)
