"""Shared fixtures. ``sim_server`` starts opsctl's sglang-API simulator on a free loopback port
(through opsctl.deploy.localsim, the launcher benchmarks use too); ``opsctl`` runs the CLI as a
user does; ``sim_image`` builds the simulator image once (real engine).

One conftest for the whole tree: tests import ``SimServer`` and ``REPO_ROOT`` from it by name."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from opsctl.deploy import localsim

REPO_ROOT = Path(__file__).resolve().parent.parent
SIM_START_TIMEOUT_S = 20.0

# A running simulator: .url (http://127.0.0.1:PORT), .port, .process, .logs(), .stop().
SimServer = localsim.LocalSim


@pytest.fixture
def sim_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., SimServer]]:
    """Factory: ``sim_server(env={...}, args=[...], wait="ready"|"listen"|"none")``.

    ``env`` adds OPSCTL_SIM_* (or other) variables; ``args`` adds sglang flags after
    ``--model-path /models/GLM-5-NVFP4`` (a later flag wins). ``wait="ready"`` returns once the
    readiness probe of ``opsctl up`` passes (use "listen" to see the warm-up 503s, "none" to see
    the load period). Every server is stopped at teardown.
    """
    started: list[SimServer] = []

    def start(
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        wait: localsim.Wait = "ready",
    ) -> SimServer:
        log_path = tmp_path_factory.mktemp("sim") / "sim.log"
        server = localsim.start(["--model-path", "/models/GLM-5-NVFP4", *args], env or {}, log_path,
                                ready_timeout_s=SIM_START_TIMEOUT_S, wait=wait)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop(timeout_s=10.0)


# --- the CLI and the simulator image (integration tests) -------------------------------------

OpsctlRunner = Callable[..., subprocess.CompletedProcess[str]]


def _run_opsctl(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """`opsctl ARGS` as a user runs it: a fresh process, no stdin, extra environment."""
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def opsctl() -> OpsctlRunner:
    return _run_opsctl


@pytest.fixture(scope="session", autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """opsctl's state (`up`'s verdicts, gates' last good variants) goes to a directory of this
    test session, never to the user's ~/.local/state/opsctl."""
    os.environ["OPSCTL_STATE_DIR"] = str(tmp_path_factory.mktemp("opsctl-state"))


@pytest.fixture(autouse=True)
def _forget_remembered_secrets() -> Iterator[None]:
    """A URL's secrets `checked_base_url` remembers (core.redact.remember_url) are masked for
    the rest of the process: one test's URL must not mask another test's text."""
    from opsctl.core import redact

    yield
    redact._remembered.clear()


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    return localsim.free_port


@pytest.fixture(scope="session")
def sim_image() -> str:
    """The simulator image, built once through the real `opsctl build` path."""
    result = _run_opsctl("build", "--profile", "sim", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    from opsctl.config.profiles import load_profile
    from opsctl.image.plan import expected_image

    return expected_image(load_profile("sim").resolve())


# --- CI: a skip would hide a missing install step ------------------------------------------------


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run fails when the tests removed a container they did not create (checked once, by
    the process that saw the whole run); under CI (CI=true), any skipped test fails it too:
    .ci/run must install what tests need."""
    if not _is_xdist_worker(session.config):
        gone = _foreign_containers_removed()
        if gone:
            print(f"\nthe tests removed containers they did not create: {', '.join(gone)}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not os.environ.get("CI"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and exitstatus == 0:
        for report in skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
            print(f"\nCI: skipped {report.nodeid}: {reason}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def wait_http_ok(url: str, process: subprocess.Popen[bytes], log: Path, deadline_s: float) -> None:
    """Wait until a service the test started answers 200 at `url`; fail with its log tail if it
    exits first or is not ready within `deadline_s`."""
    import time

    import httpx

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready:\n{log.read_text()[-3000:]}")


# --- a simulator profile of this test's own: never the user's `sim` server -----------------------


@pytest.fixture()
def own_sim(tmp_path: Path, free_port: Callable[[], int]) -> Iterator[tuple[Path, str]]:
    """(path, name) of a throwaway copy of deploy/sim.yaml with its own name and port, so a test
    that runs `up`/`down` never touches the `sim` server a user (or the quickstart) left running;
    afterwards only this copy's containers are removed."""
    from simprofile import remove_containers, sim_profile_data, write_profile

    data, name = sim_profile_data("it-sim", free_port())
    yield write_profile(data, tmp_path), name
    remove_containers(name)


# --- what was here before the tests stays: a test removes only what it created -----------------


def _containers_now() -> dict[str, str] | None:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception:  # noqa: BLE001 - no engine here: nothing to guard
        return None
    # The low-level list: the SDK's `containers.list` inspects each one and raises NotFound for
    # one removed meanwhile. An engine that answered the ping and then fails is an error here.
    return {
        c["Id"]: (c.get("Names") or ["?"])[0].lstrip("/") for c in client.api.containers(all=True)
    }


_BEFORE: dict[str, str] | None = None


def _is_xdist_worker(config: pytest.Config) -> bool:
    """Under pytest-xdist the controller sees the whole run; a worker sees only its share, and
    another worker's containers come and go while it runs."""
    return hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    global _BEFORE
    if not _is_xdist_worker(session.config):
        _BEFORE = _containers_now()


def _foreign_containers_removed() -> list[str]:
    """Containers that existed before the tests started (a user's server, the quickstart's
    `opsctl-sim`) and are gone now: tests remove only what they created."""
    after = _containers_now()
    if _BEFORE is None or after is None:
        return []
    return sorted(name for cid, name in _BEFORE.items() if cid not in after)
