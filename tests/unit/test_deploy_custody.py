"""Who removes what, and what survives a removal: the saved log, the per-profile lock, the run id,
Ctrl-C during cleanup, and a daemon that stops answering mid-`up` (FakeEngine, FakeClock).

The same contract on the real engine, through a Docker API proxy that injects the faults, is in
tests/integration/test_deploy_faults.py.
"""

from __future__ import annotations

import fcntl
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import Behaviour, FakeClock, FakeEngine, FakeSglang

from opsctl.config.profiles import load_profile
from opsctl.config.runspec import run_spec
from opsctl.core import interrupts, labels
from opsctl.core.errors import (
    EXIT_DAEMON,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    DaemonUnreachable,
    Interrupted,
    LaunchError,
    UsageError,
)
from opsctl.deploy import app, custody
from opsctl.deploy.launch import Launch, up
from opsctl.deploy.ownership import ProfileBusy, profile_locks
from opsctl.deploy.state import StateDir

PROFILE = load_profile("sim")
IMAGE = "opsctl/sim:test"
SERVED = PROFILE.model.served_name


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine(images={IMAGE: {labels.PATCH_SHA256: "abc"}})


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir(tmp_path / "state")


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "out" / "logs"


def launch(
    engine: FakeEngine,
    state: StateDir | None,
    logs: Path,
    *,
    phases: tuple[str, ...] = ("ready",),
    clock: FakeClock | None = None,
    notes: list[str] | None = None,
    **options: Any,
) -> app.UpResult:
    collaborators = Launch(engine=engine, image_for=lambda _: IMAGE, verify=None, state=state,
                           http=FakeSglang(SERVED, list(phases)).client, clock=clock or FakeClock())
    return up(PROFILE.resolve("baseline"), collaborators, logs_dir=logs,
                  on_note=(notes if notes is not None else []).append, **options)


def saved(logs: Path) -> list[str]:
    return sorted(path.name for path in logs.glob("*.log")) if logs.is_dir() else []


# --- logs survive every removal ----------------------------------------------------------------


def test_a_failed_up_saves_the_whole_log_before_it_removes_the_container(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    engine.next_run = Behaviour(exit_after_inspects=2, exit_code=3,
                                log=["Load weight begin", "RuntimeError: boom"])
    with pytest.raises(LaunchError) as caught:
        launch(engine, state, logs, phases=("refused",))
    (name,) = saved(logs)
    assert name.startswith("sim-baseline-c2-") and name.endswith("Z.log")
    text = (logs / name).read_text()
    assert "# container: c2\n# name: opsctl-sim\n# image: opsctl/sim:test\n# exit code: 3" in text
    assert "# reason: `opsctl up` failed: server exited before it was ready" in text
    assert f"# label {labels.VARIANT}=baseline" in text and "RuntimeError: boom\n" in text
    assert engine.calls.index("log_chunks") < engine.calls.index("remove")
    assert engine.containers == {}
    assert f"container removed: opsctl-sim, its log saved to {logs / name}" in caught.value.message


def test_down_and_replace_save_each_log(engine: FakeEngine, state: StateDir, logs: Path) -> None:
    launch(engine, state, logs)
    engine.containers["c2"].log = ["served one request"]
    launch(engine, state, logs, replace=True)  # same configuration, but --replace: the old goes
    assert len(saved(logs)) == 1 and "served one request" in next(logs.glob("*.log")).read_text()
    result = app.down(engine, PROFILE.name, state=state, logs_dir=logs)
    assert result.removed == ["opsctl-sim"] and len(result.logs) == 1 and result.logs[0].is_file()
    assert "# reason: `opsctl down`" in result.logs[0].read_text()
    assert len(saved(logs)) == 2 and engine.containers == {}


def test_a_log_that_cannot_be_written_keeps_the_container_stopped(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    launch(engine, state, logs)

    def logs_dir_turns_into_a_file(method: str, _: FakeEngine) -> None:
        if method == "log_chunks":
            logs.rmdir()
            logs.write_text("not a directory")

    engine.on_call = logs_dir_turns_into_a_file
    with pytest.raises(UsageError) as caught:
        app.down(engine, PROFILE.name, state=state, logs_dir=logs)
    assert "cannot save the log of opsctl-sim" in caught.value.message
    assert "stopped, not removed" in caught.value.message
    assert [c.status for c in engine.containers.values()] == ["exited"]
    assert "remove" not in engine.calls


def test_an_unwritable_log_directory_is_refused_before_anything_starts(
    engine: FakeEngine, state: StateDir, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="server log directory"):
        launch(engine, state, blocker)
    assert "run" not in engine.calls


# --- ownership: the lock and the run id ---------------------------------------------------------


def test_a_profile_held_by_another_process_is_refused_untouched(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    path = state.lock_path(PROFILE.name)
    path.parent.mkdir(parents=True)
    with path.open("a+") as other:  # another open file: another process, as flock sees it
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other.write("`opsctl up` (pid 4242, since 2026-11-29T10:00:00+00:00)\n")
        other.flush()
        with pytest.raises(ProfileBusy) as caught:
            launch(engine, state, logs)
        assert "is busy: `opsctl up` (pid 4242" in caught.value.message
        with pytest.raises(ProfileBusy):
            engine.add_container("opsctl-sim", run_spec(PROFILE.resolve("baseline"), IMAGE).labels)
            app.down(engine, PROFILE.name, state=state, logs_dir=logs)
    assert "run" not in engine.calls and "stop" not in engine.calls
    assert launch(engine, state, logs, replace=True).container.name == "opsctl-sim"  # freed


def test_the_lock_is_reentrant_within_one_process(state: StateDir, engine: FakeEngine,
                                                  logs: Path) -> None:
    with profile_locks(state, [PROFILE.name], "up --gate"):
        launch(engine, state, logs)
        app.down(engine, PROFILE.name, state=state, logs_dir=logs)
    assert "pid" in state.lock_path(PROFILE.name).read_text()


def test_cleanup_removes_only_what_this_run_created(engine: FakeEngine, state: StateDir,
                                                     logs: Path) -> None:
    winner_labels = {**run_spec(PROFILE.resolve("baseline"), IMAGE).labels, labels.RUN_ID: "theirs"}

    def another_run_wins_the_race(method: str, fake: FakeEngine) -> None:
        if method == "run" and fake.by_name("opsctl-sim") is None:
            fake.add_container("opsctl-sim", winner_labels)

    engine.on_call = another_run_wins_the_race
    with pytest.raises(LaunchError, match="already exists"):
        launch(engine, state, logs)
    (survivor,) = engine.containers.values()
    assert survivor.labels[labels.RUN_ID] == "theirs" and survivor.status == "running"
    assert saved(logs) == []


def test_each_run_labels_its_container_with_a_fresh_run_id(engine: FakeEngine, logs: Path) -> None:
    launch(engine, None, logs)
    launch(engine, None, logs, replace=True)
    first, second = (spec.labels[labels.RUN_ID] for spec in engine.specs)
    assert first != second and len(first) == 24


# --- Ctrl-C -------------------------------------------------------------------------------------


def test_ctrl_c_while_the_engine_creates_leaves_no_created_container(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    engine.next_run = Behaviour(fail_after_create=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        launch(engine, state, logs)
    assert engine.containers == {} and engine.removed == ["opsctl-sim"]


def test_a_second_ctrl_c_during_cleanup_leaves_it_running_and_names_it(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    """Real SIGINTs through the guard's handler: the first during the readiness wait, the second
    while the cleanup stops the server."""
    notes: list[str] = []

    def second_ctrl_c_while_stopping(method: str, _: FakeEngine) -> None:
        if method == "stop":
            signal.raise_signal(signal.SIGINT)

    def first_ctrl_c(_: app.Progress) -> None:
        engine.on_call = second_ctrl_c_while_stopping
        signal.raise_signal(signal.SIGINT)

    with pytest.raises(Interrupted) as caught:
        launch(engine, state, logs, phases=("refused",), notes=notes, on_progress=first_ctrl_c)
    assert caught.value.exit_code == EXIT_INTERRUPTED
    assert "left as it is (Ctrl-C again): opsctl-sim (c2)" in caught.value.message
    assert "opsctl down --profile sim" in caught.value.message
    assert any("Ctrl-C again to leave it running" in note for note in notes)
    assert [c.status for c in engine.containers.values()] == ["running"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_one_ctrl_c_removes_it_and_saves_its_log(engine: FakeEngine, state: StateDir,
                                                 logs: Path) -> None:
    def ctrl_c(_: app.Progress) -> None:
        signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        launch(engine, state, logs, phases=("refused",), on_progress=ctrl_c)
    assert engine.containers == {} and len(saved(logs)) == 1
    assert "# reason: `opsctl up` failed: interrupted (Ctrl-C)" in next(logs.glob("*")).read_text()


@pytest.fixture
def termination(monkeypatch: pytest.MonkeyPatch) -> Any:
    """SIGTERM and SIGHUP taken as opsctl's entry takes them; restored, and forgotten, after."""
    monkeypatch.setattr(interrupts, "_received", [])
    kept = {signum: signal.getsignal(signum) for signum in interrupts.INTERRUPTIONS}
    hook = sys.unraisablehook
    for signum in interrupts.TERMINATING:
        signal.signal(signum, signal.SIG_DFL)
    interrupts.arm()
    yield
    interrupts.disarm()
    sys.unraisablehook = hook
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def test_sigterm_then_sighup_during_cleanup_is_the_ctrl_c_pair(
    engine: FakeEngine, state: StateDir, logs: Path, termination: None
) -> None:
    """Termination is interruption (issue 37): a SIGTERM in the readiness wait starts the
    cleanup, as a Ctrl-C does; a SIGHUP while it stops the server leaves it and names it; the
    run exits 143, the first signal's code."""
    notes: list[str] = []

    def hang_up_while_stopping(method: str, _: FakeEngine) -> None:
        if method == "stop":
            signal.raise_signal(signal.SIGHUP)

    def terminate(_: app.Progress) -> None:
        engine.on_call = hang_up_while_stopping
        signal.raise_signal(signal.SIGTERM)

    with pytest.raises(Interrupted) as caught:
        launch(engine, state, logs, phases=("refused",), notes=notes, on_progress=terminate)
    assert caught.value.exit_code == EXIT_TERMINATED
    assert caught.value.message.startswith("interrupted (SIGTERM); left as it is (SIGTERM "
                                           "again): opsctl-sim (c2)")
    assert any("SIGTERM again to leave it running" in note for note in notes)
    assert [c.status for c in engine.containers.values()] == ["running"]
    assert signal.getsignal(signal.SIGTERM) is interrupts.interrupt


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_one_sigterm_or_sighup_removes_it_and_saves_its_log(
    engine: FakeEngine, state: StateDir, logs: Path, termination: None, signum: int
) -> None:
    def terminate(_: app.Progress) -> None:
        signal.raise_signal(signum)

    with pytest.raises(KeyboardInterrupt):
        launch(engine, state, logs, phases=("refused",), on_progress=terminate)
    assert engine.containers == {} and len(saved(logs)) == 1
    reason = f"# reason: `opsctl up` failed: interrupted ({signal.Signals(signum).name})"
    assert reason in next(logs.glob("*")).read_text()


# --- the daemon dying mid-up --------------------------------------------------------------------

GONE = DaemonUnreachable("the Docker engine stopped answering while inspecting a container: "
                         "ReadTimeout: read timed out", hint="check `docker info`")


def daemon_dies_at(engine: FakeEngine, method: str, error: BaseException, calls_lost: int) -> None:
    """The first call of `method` raises `error`; the `calls_lost` engine calls after it raise
    DaemonUnreachable too (the daemon is away), then it answers again."""
    lost: dict[str, int | None] = {"left": None}

    def die(called: str, _: FakeEngine) -> None:
        if lost["left"] is None and called == method:
            lost["left"] = calls_lost
            raise error
        if lost["left"]:
            lost["left"] -= 1
            raise DaemonUnreachable("the Docker engine stopped answering", hint="")

    engine.on_call = die


def test_daemon_gone_while_waiting_then_back_removes_the_container(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    daemon_dies_at(engine, "inspect", GONE, calls_lost=3)  # back after 3 tries
    clock, notes = FakeClock(), list[str]()
    with pytest.raises(DaemonUnreachable) as caught:
        launch(engine, state, logs, clock=clock, notes=notes)
    assert caught.value.exit_code == EXIT_DAEMON
    assert caught.value.message.startswith("the Docker engine stopped answering")
    assert "container removed: opsctl-sim" in caught.value.message
    assert clock.sleeps == [custody.RETRY_EVERY_SECONDS] * 3
    assert any("trying again" in note for note in notes)
    assert engine.containers == {} and len(saved(logs)) == 1


def test_daemon_that_never_comes_back_is_named_with_what_it_left(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    daemon_dies_at(engine, "inspect", GONE, calls_lost=10_000)
    clock = FakeClock()
    with pytest.raises(DaemonUnreachable) as caught:
        launch(engine, state, logs, clock=clock)
    message = caught.value.message
    assert "left behind: opsctl-sim (c2), the engine did not answer for 20 s" in message
    assert "`opsctl down --profile sim` removes it once the engine answers" in message
    assert "\n" not in message
    assert custody.DAEMON_RETRY_SECONDS <= clock.time - 1000.0 <= custody.DAEMON_RETRY_SECONDS + 5


def test_daemon_dropped_during_create_names_the_container_by_its_run_id(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    daemon_dies_at(engine, "run", DaemonUnreachable("the Docker engine stopped answering while "
                                                    "creating opsctl-sim: ConnectionError",
                                                    hint=""), calls_lost=10_000)
    with pytest.raises(DaemonUnreachable) as caught:
        launch(engine, state, logs)
    assert "opsctl-sim if the engine created it (label opsctl.run-id=" in caught.value.message


def test_daemon_dropped_after_creating_still_finds_it_by_its_run_id(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    engine.next_run = Behaviour(fail_after_create=DaemonUnreachable("dropped", hint=""))
    with pytest.raises(DaemonUnreachable, match="container removed: opsctl-sim"):
        launch(engine, state, logs)
    assert engine.containers == {}


def test_a_server_restarted_by_its_policy_while_loading_is_a_failed_start(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    engine.next_run = Behaviour(restart_after_inspects=2, exit_code=1,
                                log=["torch.OutOfMemoryError: CUDA out of memory"])
    with pytest.raises(LaunchError) as caught:
        launch(engine, state, logs, phases=("refused",))
    assert "exited before it was ready (exit code 1)" in caught.value.message
    assert engine.containers == {}


# --- a removal a Ctrl-C cut short goes on in the daemon -----------------------------------------


def test_a_container_gone_before_its_log_is_read_is_retired_with_no_log(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    """`tune` takes a point down again after a Ctrl-C cut the first `down` short; by then the
    daemon may have finished that removal: the second `down` is done, not an error."""
    launch(engine, state, logs)

    def removed_by_the_daemon(method: str, fake: FakeEngine) -> None:
        if method == "inspect":
            fake.containers.clear()

    engine.on_call = removed_by_the_daemon
    result = app.down(engine, PROFILE.name, state=state, logs_dir=logs)
    assert result.removed == ["opsctl-sim"] and result.logs == []
    assert saved(logs) == []


def test_a_container_the_engine_is_removing_is_waited_for_not_logged(
    engine: FakeEngine, state: StateDir, logs: Path
) -> None:
    """No file that claims to be its log: the engine answers 409 for the log of a container it
    is removing."""
    launch(engine, state, logs)
    engine.containers["c2"].status = "removing"
    result = app.down(engine, PROFILE.name, state=state, logs_dir=logs)
    assert result.removed == ["opsctl-sim"] and result.logs == [] and saved(logs) == []
    assert "log_chunks" not in engine.calls and engine.containers == {}


def test_a_ctrl_c_while_the_lock_holder_is_written_releases_the_lock(state: StateDir) -> None:
    """Found by the tune Ctrl-C module in CI: a Ctrl-C between taking the flock and writing who
    holds it left the file open, so the run's own next `down` found its profile busy (exit 4)."""

    class InterruptingClock(FakeClock):
        def now(self) -> Any:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught, \
            profile_locks(state, [PROFILE.name], "down", InterruptingClock()):
        pass
    assert caught.value is not None  # the traceback, and its frames, are still alive here
    with profile_locks(state, [PROFILE.name], "down"):
        pass
