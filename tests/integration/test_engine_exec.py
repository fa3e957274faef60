"""The engine's `exec` against the real daemon (the contract FakeEngine.exec stands in for): a
command's output and exit code, a deadline that returns instead of hanging, the output cap, a
container that is not running; the published ports `inspect` reports; and `bench --driver
sglang-bench` reaching the container bench launched."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from opsctl.core.errors import EXIT_SMOKE, LaunchError
from opsctl.core.labels import MANAGED, ROLE, TRUE
from opsctl.engine.api import ContainerInfo, Engine, PortBinding, RunSpec
from opsctl.engine.dockerpy import connect

pytestmark = pytest.mark.docker

SLEEPER = ["python3", "-c", "import time; time.sleep(900)"]


@pytest.fixture()
def running(sim_image: str, free_port: Callable[[], int]) -> Iterator[tuple[Engine, ContainerInfo]]:
    engine = connect()
    spec = RunSpec(image=sim_image, command=SLEEPER, name=f"opsctl-exec-{uuid.uuid4().hex[:8]}",
                   labels={MANAGED: TRUE, ROLE: "exec-test"},
                   ports=[PortBinding(container_port=30000, host_port=free_port())],
                   stop_grace_seconds=1)
    info = engine.run(spec)
    try:
        yield engine, info
    finally:
        engine.remove(info.id)


def _python(code: str) -> list[str]:
    return ["python3", "-c", code]


def test_exec_returns_output_and_exit_code(running: tuple[Engine, ContainerInfo]) -> None:
    engine, info = running
    ok = engine.exec(info.id, _python("import os, sys; print('out', os.environ['OPSCTL_X']); "
                                      "print('err', file=sys.stderr)"),
                     env={"OPSCTL_X": "42"}, timeout_seconds=60, max_output_bytes=4096)
    assert ok.exit_code == 0 and not ok.timed_out and not ok.truncated
    assert b"out 42" in ok.output and b"err" in ok.output
    failed = engine.exec(info.id, _python("raise SystemExit(3)"), env={}, timeout_seconds=60,
                         max_output_bytes=4096)
    assert failed.exit_code == 3 and not failed.timed_out


def test_exec_past_its_deadline_returns_instead_of_waiting(
    running: tuple[Engine, ContainerInfo]
) -> None:
    engine, info = running
    started = time.monotonic()
    hung = engine.exec(info.id, _python("print('started', flush=True); import time; "
                                        "time.sleep(900)"),
                       env={}, timeout_seconds=2, max_output_bytes=4096)
    assert hung.timed_out and hung.exit_code is None and b"started" in hung.output
    assert time.monotonic() - started < 120  # far below the command's 900 s


def test_exec_keeps_only_the_tail_of_a_large_output(running: tuple[Engine, ContainerInfo]) -> None:
    engine, info = running
    big = engine.exec(info.id, _python("import sys; sys.stdout.write('x' * 300000 + 'END')"),
                      env={}, timeout_seconds=60, max_output_bytes=1000)
    assert big.exit_code == 0 and big.truncated
    assert len(big.output) == 1000 and big.output.endswith(b"xEND")


def test_exec_in_a_stopped_container_is_a_launch_error(
    running: tuple[Engine, ContainerInfo]
) -> None:
    engine, info = running
    assert info.ports and info.ports[0].container_port == 30000  # inspect reports the binding
    engine.stop(info.id, grace_seconds=1)
    with pytest.raises(LaunchError):
        engine.exec(info.id, ["true"], env={}, timeout_seconds=30, max_output_bytes=100)


def test_bench_sglang_driver_runs_in_the_launched_container(opsctl, sim_image: str, own_sim,
                                                           tmp_path) -> None:
    """The whole wiring on the real engine: bench launches the variant, finds its container by
    the published port and runs bench_serving there through `exec`. The simulator image has no
    sglang, so the level fails with bench_serving's own words (exit 5)."""
    out = tmp_path / "bench"
    try:
        bench = opsctl("bench", "--profile", str(own_sim[0]), "--image", sim_image,
                       "--variants", "gathercast", "--driver",
                       "sglang-bench", "--dataset-name", "random", "--concurrency", "1",
                       "--requests", "2", "--out", str(out), timeout=600)
    finally:
        opsctl("down", "--profile", str(own_sim[0]))
    assert bench.returncode == EXIT_SMOKE, bench.stdout + bench.stderr
    report = json.loads((out / "bench.json").read_text())
    assert report["config"]["driver"] == "sglang-bench"
    assert report["variants"][0]["launched_by_bench"] is True
    level = report["variants"][0]["levels"][0]
    assert "sglang.bench_serving exited 1" in level["aborted"]
    assert "No module named" in level["aborted"]  # python3 ran inside the simulator's container


def test_a_saved_log_holds_a_long_lines_secret_masked_whole(
        sim_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real daemon stamps every 16 KiB piece of a long line (sglang's server_args line,
    which carries --api-key's value, can be that long); the saved log joins the pieces, so the
    secret across a cut is found and masked."""
    from datetime import UTC, datetime

    from opsctl.core.labels import SECRET_ENV
    from opsctl.deploy.logsave import save_log

    secret = "srv-key-" + uuid.uuid4().hex
    monkeypatch.setenv("OPSCTL_TEST_SERVER_KEY", secret)
    code = (f"import sys; sys.stdout.write('a' * {16384 - len(secret) // 2} + "
            f"'api_key={secret}' + 'b' * 40000 + '\\n')")
    engine = connect()
    spec = RunSpec(image=sim_image, command=_python(code),
                   name=f"opsctl-logkey-{uuid.uuid4().hex[:8]}",
                   labels={MANAGED: TRUE, ROLE: "exec-test", SECRET_ENV: "OPSCTL_TEST_SERVER_KEY"},
                   stop_grace_seconds=1)
    info = engine.run(spec)
    try:
        deadline = time.monotonic() + 60
        while engine.inspect(info.id).status == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
        saved = save_log(engine, engine.inspect(info.id), tmp_path, "test",
                         datetime.now(UTC)).read_bytes()
    finally:
        engine.remove(info.id)
    body = saved.split(b"# --- log (docker logs --timestamps) ---\n", 1)[1]
    assert secret.encode() not in saved and secret[-6:].encode() not in saved
    assert body.count(b"\n") == 1 and b"api_key=****" in body and body.count(b"b") >= 40000
