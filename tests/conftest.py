"""Shared fixtures. ``sim_server`` starts opsctl's sglang-API simulator on a free loopback port;
``opsctl`` runs the CLI as a user does; ``sim_image`` builds the simulator image once (real engine).

One conftest for the whole tree: tests import ``SimServer`` and ``REPO_ROOT`` from it by name."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SIM_START_TIMEOUT_S = 20.0


@dataclass
class SimServer:
    """A running simulator: ``url`` is its base URL (``http://127.0.0.1:PORT``)."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def logs(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait, SIGKILL as a last resort; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        return self.process.returncode


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _status(url: str) -> int | None:
    """HTTP status of a GET, or None while the port is closed."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def _wait(server: SimServer, until: str) -> None:
    deadline = time.monotonic() + SIM_START_TIMEOUT_S
    path = "/health_generate" if until == "ready" else "/v1/models"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"simulator exited with {server.process.returncode}:\n"
                               f"{server.logs()}")
        status = _status(server.url + path)
        if status is not None and (until == "listen" or status == 200):
            return
        time.sleep(0.05)
    raise TimeoutError(f"simulator not {until} within {SIM_START_TIMEOUT_S}s:\n{server.logs()}")


@pytest.fixture
def sim_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., SimServer]]:
    """Factory: ``sim_server(env={...}, args=[...], wait="ready"|"listen"|"none")``.

    ``env`` adds OPSCTL_SIM_* (or other) variables; ``args`` adds sglang flags after
    ``--model-path /models/GLM-5-NVFP4 --host 127.0.0.1 --port <free>`` (a later flag wins).
    ``wait="ready"`` returns once /health_generate is 200 (use "listen" to see the warm-up 503s,
    "none" to see the load period). Every server is stopped at teardown.
    """
    started: list[SimServer] = []

    def start(
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        wait: str = "ready",
    ) -> SimServer:
        port = _free_port()
        log_path = tmp_path_factory.mktemp("sim") / "sim.log"
        command = [sys.executable, "-m", "opsctl.sim", "--model-path", "/models/GLM-5-NVFP4",
                   "--host", "127.0.0.1", "--port", str(port), *args]
        child_env = {**os.environ, **(env or {})}
        child_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(command, env=child_env, stdout=log_file,
                                       stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        server = SimServer(url=f"http://127.0.0.1:{port}", port=port, process=process,
                           log_path=log_path)
        started.append(server)
        if wait != "none":
            _wait(server, wait)
        return server

    yield start
    for server in started:
        server.stop()


# --- the CLI and the simulator image (integration tests) -------------------------------------

OpsctlRunner = Callable[..., subprocess.CompletedProcess[str]]


def _run_opsctl(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """`opsctl ARGS` as a user runs it: a fresh process, no stdin, extra environment."""
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def opsctl() -> OpsctlRunner:
    return _run_opsctl


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    return _free_port


@pytest.fixture(scope="session")
def sim_image() -> str:
    """The simulator image, built once through the real `opsctl build` path."""
    result = _run_opsctl("build", "--profile", "sim", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    from opsctl.deploy.profiles import load_profile
    from opsctl.image.build import expected_image

    return expected_image(load_profile("sim"))


# --- CI: a skip would hide a missing install step ------------------------------------------------


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI (CI=true), any skipped test fails the run: .ci/run must install what tests need."""
    if not os.environ.get("CI"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and exitstatus == 0:
        for report in skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
            print(f"\nCI: skipped {report.nodeid}: {reason}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
