"""`up` is never silent: the start-up phase read from the server's log, a line per phase and a
"still" line while one lasts, on a console that is not a terminal (piped, nohup, systemd).

The phase lines are matched against a real sglang 0.5.15 server's log
(bench/results/sglang_h200/server-glm5.log); the clock is a FakeClock, so nothing sleeps.
"""

from __future__ import annotations

import io

import pytest
from fakes import FakeClock, FakeEngine, FakeSglang
from rich.console import Console

from opsctl.config.profiles import load_profile
from opsctl.core import labels
from opsctl.core.paths import project_root
from opsctl.deploy import app, readiness, view
from opsctl.deploy.launch import Launch, up
from opsctl.deploy.readiness import Phase, Probe

REAL_LOG = project_root() / "bench" / "results" / "sglang_h200" / "server-glm5.log"
PROFILE = load_profile("sim")
IMAGE = "opsctl/sim:test"


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _log_up_to(text: str) -> str:
    lines = REAL_LOG.read_text().splitlines(keepends=True)
    (index,) = [i for i, line in enumerate(lines) if text in line]
    return "".join(lines[: index + 1])


@pytest.mark.parametrize(("last_line", "phase"), [
    ("Load weight begin.", "loading weights"),
    ("Load weight end.", "weights loaded, allocating the KV cache"),
    ("Memory pool end.", "KV cache allocated"),
    ("Capture target decode CUDA graph begin.", "capturing CUDA graphs"),
    ("Capture target decode CUDA graph end.", "CUDA graphs captured"),
    ("Uvicorn running on", "listening, warming up"),
    ("The server is fired up and ready to roll!", "warmed up"),
])
def test_the_phase_is_the_real_logs_last_phase_line(last_line: str, phase: str) -> None:
    assert readiness.startup_phase(_log_up_to(last_line)) == phase


def test_a_log_without_a_phase_line_has_no_phase() -> None:
    assert readiness.startup_phase(_log_up_to("Init torch distributed begin.")) is None


def test_a_progress_bar_after_the_phase_line_keeps_the_phase() -> None:
    log = ("[2026-12-02 10:35:30 TP3] Capture target decode CUDA graph begin. bs=[1, 2]\n"
           "Capturing batches (bs=8):   0%|  | 0/4\rCapturing batches (bs=4):  25%|  | 1/4")
    assert readiness.startup_phase(log) == "capturing CUDA graphs"


def _up(engine: FakeEngine, server: FakeSglang, seen: list[app.Progress], clock: FakeClock,
        on_report=None) -> app.UpResult:
    launch = Launch(engine=engine, image_for=lambda _: IMAGE, verify=None, state=None,
                    http=server.client, clock=clock)

    def report(progress: app.Progress) -> None:
        seen.append(progress)
        if on_report is not None:
            on_report(engine, len(seen))

    return up(PROFILE.resolve("gathercast"), launch, on_progress=report)


def test_each_report_carries_the_phase_the_servers_log_announced_last() -> None:
    engine, seen = FakeEngine(images={IMAGE: {labels.PATCH_SHA256: "abc"}}), []
    script = {1: "[t] Load weight begin. avail mem=139.09 GB",
              2: "[t] Capture target decode CUDA graph begin. backend=full",
              3: "[t] INFO:     Uvicorn running on http://0.0.0.0:30000"}

    def grow_log(engine: FakeEngine, count: int) -> None:
        (container,) = engine.containers.values()
        container.log += ["[t] a line that says nothing about phases"] * 300  # past the tail read
        if count in script:
            container.log.append(script[count])

    _up(engine, FakeSglang(PROFILE.model.served_name, ["refused", "refused", "503", "503",
                                                       "ready"]), seen, FakeClock(), grow_log)
    assert [p.server_phase for p in seen] == [
        "", "loading weights", "capturing CUDA graphs", "listening, warming up",
        "listening, warming up"]


def test_a_long_poll_interval_still_reports_every_tick() -> None:
    clock, reports = FakeClock(), []
    states = iter([Probe(Phase.LOADING, "port closed")] * 3 + [Probe(Phase.READY, "ok")])
    readiness.wait_ready(lambda: next(states), exited=lambda: None, timeout_seconds=3600,
                         poll_seconds=60, clock=clock,
                         on_progress=lambda state, elapsed: reports.append(elapsed))
    assert reports[-1] == 180
    assert max(b - a for a, b in zip(reports, reports[1:], strict=False)) <= readiness.TICK_SECONDS


def _progress(elapsed: float, server_phase: str = "", phase: Phase = Phase.LOADING,
              detail: str = "port closed", log: str = "") -> app.Progress:
    return app.Progress(Probe(phase, detail), elapsed, log, server_phase)


def test_a_line_per_phase_and_a_still_line_at_least_every_30_seconds() -> None:
    lines = view.PhaseLines("sim/gathercast")
    shown = {t: lines.line(_progress(t, "loading weights", log=f"shard {t}"))
             for t in range(0, 100, 2)}
    printed = sorted(t for t, line in shown.items() if line is not None)
    assert printed[0] == 0 and "  loading weights (port closed)" in str(shown[0])
    gaps = [b - a for a, b in zip(printed, printed[1:], strict=False)]
    assert gaps and all(gap <= readiness.HEARTBEAT_SECONDS + 2 for gap in gaps)
    assert readiness.HEARTBEAT_SECONDS + readiness.TICK_SECONDS \
        + readiness.PROBE_TIMEOUT_SECONDS <= readiness.REPORT_EVERY_SECONDS
    assert "still loading weights" in str(shown[printed[1]]) and "shard" in str(shown[printed[1]])
    changed = lines.line(_progress(101, "capturing CUDA graphs"))
    assert changed is not None and "1m41s  capturing CUDA graphs" in changed


def test_up_progress_prints_its_lines_on_a_console_that_is_not_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with view.up_progress(console, PROFILE.resolve("gathercast")) as report:
        report(_progress(0))
        report(_progress(2, "loading weights"))
        report(_progress(4, "loading weights"))
        report(_progress(64, "listening, warming up", Phase.WARMING,
                         "/health_generate answered 503"))
        report(_progress(66, "warmed up", Phase.READY, "healthy and serving glm-5"))
    printed = out.getvalue().splitlines()
    assert printed == [
        "sim/gathercast   0m00s  starting (port closed)",
        "sim/gathercast   0m02s  loading weights (port closed)",
        "sim/gathercast   1m04s  listening, warming up (/health_generate answered 503)",
        "sim/gathercast   1m06s  healthy and serving glm-5",
    ]


def test_the_reported_log_line_never_shows_the_servers_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """sglang logs its arguments, --api-key's value too; `up` prints the last log line piped."""
    secret = "sk-first-hour-sentinel-0042"
    monkeypatch.setenv("FIRST_HOUR_KEY", secret)
    server = PROFILE.server.model_copy(update={"api_key_env": "FIRST_HOUR_KEY"})
    profile = PROFILE.model_copy(update={"server": server})
    engine, seen = FakeEngine(images={IMAGE: {labels.PATCH_SHA256: "abc"}}), []

    def log_the_key(engine: FakeEngine, count: int) -> None:
        (container,) = engine.containers.values()
        container.log.append(f"[t] server_args=ServerArgs(api_key='{secret}', port=30000)")

    launch = Launch(engine=engine, image_for=lambda _: IMAGE, verify=None, state=None,
                    http=FakeSglang(profile.model.served_name, ["refused", "ready"]).client,
                    clock=FakeClock())
    up(profile.resolve("gathercast"), launch,
           on_progress=lambda progress: (seen.append(progress), log_the_key(engine, len(seen))))
    assert "server_args" in seen[-1].last_log_line and secret not in seen[-1].last_log_line
