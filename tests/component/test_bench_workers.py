"""Client worker processes and the TTFT clock, over real HTTP on loopback.

A level split across worker processes sends every request once, merges their results and
counts their CPU; Ctrl-C (as a terminal sends it: to the whole process group) and the sweep's
deadline stop every worker promptly, leave a partial report, and leave no process behind; a
worker that dies is named, not waited for forever. The TTFT clock starts when the request is
written, not while it waits for a pooled connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO_ROOT, SimServer
from hostile import HostileServer

from opsctl.traffic.bench.levels import Phase, PhasePlan, RequestSpec
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.bench.workers import WorkerDied, WorkerPool, WorkerSetup
from opsctl.traffic.bench.workloads import Workload, WorkloadSpec, build
from opsctl.traffic.client import RequestResult, make_client, request_body, stream_generate
from opsctl.traffic.settings import BenchSettings


def _workers_of(marker: str) -> list[int]:
    """Live processes whose environment carries `marker` (the CLI and its workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in environ and state != "Z":
                found.append(int(entry.name))
    return found


def _bench(server: HostileServer, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    marker = f"OPSCTL_TEST_MARKER={uuid.uuid4()}"
    env = {**os.environ, "COLUMNS": "200", marker.split("=")[0]: marker.split("=")[1]}
    env.pop("OPSCTL_API_KEY", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "opsctl", "bench", "--base-url", server.url, "--concurrency", "2",
         "--requests", "6", "--client-workers", "2", "--request-timeout", "600",
         "--out", str(tmp_path / "bench"), *extra],
        env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL, start_new_session=True)  # its own group, as in a terminal
    process.marker = marker  # type: ignore[attr-defined]
    return process


def _level(tmp_path: Path) -> dict[str, object]:
    report = json.loads((tmp_path / "bench" / "bench.json").read_text())
    level: dict[str, object] = report["variants"][0]["levels"][0]
    return level


def test_a_level_split_across_workers_sends_every_request_once() -> None:
    with HostileServer("ok") as server:
        options = BenchOptions(BenchSettings(concurrency=(4,), requests_per_level=12,
                                             input_words=8, output_tokens=16,
                                             request_timeout_s=10.0, client_workers=2))
        report = run_bench([Target("hostile", server.url)], options)
        prompts = [r.body.get("prompt") for r in server.requests if r.path == "/v1/completions"]
    assert report.passed, report.model_dump_json()
    level = report.variants[0].levels[0]
    assert (level.client_workers, level.requests, level.completed, level.warmup_requests) == (
        2, 12, 12, 4)
    assert len(prompts) == len(set(prompts)) == 16  # warm-up and measured, each prompt once
    assert level.output_tokens == 12 * 5 and level.client_cpu_s and level.client_cpu_s > 0
    assert level.client_cpu_us_per_token == pytest.approx(  # client_cpu_s is rounded to 0.1 ms
        level.client_cpu_s / level.output_tokens * 1e6, abs=1e-4 / level.output_tokens * 1e6)


def test_poisson_arrivals_across_workers_send_the_whole_count(sim_server: Callable[..., SimServer]
                                                              ) -> None:
    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "2"},
                     args=["--served-model-name", "glm-5"]).url
    options = BenchOptions(BenchSettings(concurrency=(4,), requests_per_level=16, input_words=8,
                                         output_tokens=8, request_timeout_s=10.0,
                                         client_workers=3, request_rate=50.0), arrival_seed=1)
    report = run_bench([Target("sim", url)], options)
    level = report.variants[0].levels[0]
    assert report.passed and (level.client_workers, level.completed) == (3, 16)
    assert level.itl_ms.p50 is not None and level.ttft_ms.p50 is not None


@pytest.mark.parametrize(("stop", "code", "by"), [
    (lambda pid: os.killpg(pid, signal.SIGINT), 130, "Ctrl-C"),  # what a terminal's Ctrl-C does
    (lambda pid: os.kill(pid, signal.SIGTERM), 143, "SIGTERM"),  # `kill`: the parent alone
], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_every_worker_and_keeps_what_finished(
        tmp_path: Path, stop: Callable[[int], None], code: int, by: str) -> None:
    # Warm-up (one per worker) and one measured request per worker answer; the next hang.
    with HostileServer("ok", hang_after=4, max_seconds=60) as server:
        process = _bench(server, tmp_path)
        try:
            assert server.wait_for(6), "the requests to interrupt never arrived"
            assert len(_workers_of(process.marker)) == 3  # type: ignore[attr-defined]
            stop(process.pid)
            out, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == code, out + err
    assert "Traceback" not in out + err
    assert _workers_of(process.marker) == []  # type: ignore[attr-defined]
    level = _level(tmp_path)
    assert level["aborted"] == f"interrupted ({by})"
    assert (level["completed"], level["in_flight_cut"], level["client_workers"]) == (2, 2, 2)


def _starting_worker(marker: str) -> bool:
    """Whether a client worker of the run marked `marker` is importing: Python's SIGINT handler
    is installed (SigCgt), and the worker has not yet ignored SIGINT."""
    for pid in _workers_of(marker):
        with contextlib.suppress(OSError):
            if b"worker_main" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            masks = dict(line.split(":\t", 1) for line in
                         Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
            if int(masks["SigCgt"], 16) & (1 << (signal.SIGINT - 1)):
                return True
    return False


def test_ctrl_c_while_workers_start_prints_no_traceback(tmp_path: Path) -> None:
    # The workers are still importing (before they could ignore SIGINT): the Ctrl-C is the
    # parent's alone to handle.
    with HostileServer("ok", max_seconds=60) as server:
        process = _bench(server, tmp_path)
        try:
            deadline = time.monotonic() + 30
            while not _starting_worker(process.marker) and time.monotonic() < deadline:  # type: ignore[attr-defined]
                time.sleep(0.001)
            os.killpg(process.pid, signal.SIGINT)
            out, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, out + err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err
    assert _workers_of(process.marker) == []  # type: ignore[attr-defined]


def test_the_deadline_stops_every_worker(tmp_path: Path) -> None:
    with HostileServer("ok", hang_after=4, max_seconds=60) as server:
        process = _bench(server, tmp_path, "--deadline", "8")
        try:
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 5, out + err
    assert _workers_of(process.marker) == []  # type: ignore[attr-defined]
    level = _level(tmp_path)
    assert level["aborted"] == "the 8s deadline was reached"
    assert (level["completed"], level["in_flight_cut"]) == (2, 2)


@pytest.mark.parametrize("how", ["killed", "crashed"])
def test_a_worker_that_dies_is_named(how: str) -> None:
    # A workload without items fails on its first request: a crash inside the worker's phase.
    workload = build(WorkloadSpec()) if how == "killed" else Workload("none", [], WorkloadSpec())

    async def go() -> str:
        spec = RequestSpec("completions", "m", 0.0, False, 5.0, workload)
        setup = WorkerSetup("http://127.0.0.1:9", None, 5.0, 1, spec, make_client)
        with WorkerPool(setup, 2) as pool:
            if how == "killed":
                pool._workers[0].process.kill()  # what the OS's OOM killer would do
                pool._workers[0].process.wait()
            with pytest.raises(WorkerDied) as died:
                await pool.runner(2).run(PhasePlan(0, 2, 2), Phase(), None)
        return str(died.value)

    message = asyncio.run(go())
    assert message.startswith("client worker 0 ended without reporting its phase (exit code")
    assert message.endswith("(exit code -9)" if how == "killed" else "(exit code 1)")


def test_the_ttft_clock_starts_when_the_request_is_written(sim_server: Callable[..., SimServer]
                                                          ) -> None:
    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "400", "OPSCTL_SIM_ITL_MS": "100"},
                     args=["--served-model-name", "glm-5"]).url

    async def two_through_one_connection() -> list[RequestResult]:
        async with make_client(url, None, max_connections=1) as client:
            body = request_body("completions", "glm-5", "hello", max_tokens=4, stream=True,
                                ignore_eos=True)
            return list(await asyncio.gather(
                *(stream_generate(client, "completions", body, timeout_s=30) for _ in range(2))))

    first, second = sorted(asyncio.run(two_through_one_connection()),
                           key=lambda r: r.e2e_s or 0.0)
    assert first.ok and second.ok
    # The second waited for the only connection during the whole first request; had its clock
    # started then, its TTFT would exceed the first one's whole E2E.
    assert second.ttft_s is not None and first.e2e_s is not None
    assert second.ttft_s < first.e2e_s
