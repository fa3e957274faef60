"""Ctrl-C, SIGTERM and SIGHUP at random points of `up`, `decide`, `up --gate`, `tune`, `trace
capture` and `doctor`, on the real Docker engine with the simulator image (issue 25, item 5;
issue 37).

Each command first runs once to the end (its length sets the spread of the timings), then
OPSCTL_INTERRUPT_TIMINGS times (default 30), stopped after a delay drawn from a seeded RNG
(OPSCTL_INTERRUPT_SEED) across that length: launch, readiness wait, verify, smoke, bench, down.
The timings take turns at the four ways a run is stopped (`STOPS`): SIGINT to its whole process
group, as a terminal's Ctrl-C is; SIGTERM to the process alone, as `kill` or systemd's main
process gets it; SIGTERM to the group, as GNU `timeout` sends it; SIGHUP to the group, as a
closed terminal's is. Every timing has a profile copy of its own (own name and port), so
timings run side by side (OPSCTL_INTERRUPT_WORKERS) and touch only their own containers. Each
one must end within a bound with 128 + the signal's number (130, 143, 129; or the command's
finishing code when it was done before the signal: counted, and a minority), print no traceback
and no other signal's name as what interrupted it, leave no process of its group and no
container it started, and, when it had begun writing a report, leave that report marked partial.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker
import httpx
import pytest
from doctor_samples import fake_tools
from simprofile import remove_containers, sim_profile_data, write_profile

from opsctl.core import labels
from opsctl.core.errors import EXIT_HOST
from opsctl.core.interrupts import INTERRUPTIONS
from opsctl.decide.report import DECIDE_JSON
from opsctl.deploy.localsim import free_port
from opsctl.trace.report import ANALYSIS_JSON
from opsctl.tune.state import STATE_FILE

pytestmark = pytest.mark.docker

TIMINGS = int(os.environ.get("OPSCTL_INTERRUPT_TIMINGS", "30"))
SEED = int(os.environ.get("OPSCTL_INTERRUPT_SEED", "25"))
WORKERS = int(os.environ.get("OPSCTL_INTERRUPT_WORKERS", "6"))
EXIT_BOUND_S = 90.0  # from the signal to the exit: the cleanup of one server, with slack
RUN_BOUND_S = 300.0  # an uninterrupted run of one command
FINISHED_SHARE = 1 / 3  # at most this share of the timings may land after the command ended


@dataclass(frozen=True)
class Stop:
    """One way a run is stopped: a signal, to its whole process group or to the process alone."""

    name: str
    signum: int
    group: bool

    def send(self, pid: int) -> None:
        (os.killpg if self.group else os.kill)(pid, self.signum)


STOPS = (Stop("ctrl-c", signal.SIGINT, group=True), Stop("kill", signal.SIGTERM, group=False),
         Stop("timeout", signal.SIGTERM, group=True), Stop("hangup", signal.SIGHUP, group=True))


@dataclass
class Run:
    """One command's run: what it was given, and what it did."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    profile: str = ""
    out: Path | None = None
    code: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    stop: Stop = STOPS[0]

    @property
    def interrupted(self) -> int:
        """The exit code of this run once its signal interrupted it: 128 + its number."""
        return INTERRUPTIONS[self.stop.signum][1]


def _group_members(pgid: int) -> list[str]:
    """Processes of process group `pgid` that are not zombies, as `pid comm`."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm_end = text.rfind(")")
        fields = text[comm_end + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(f"{stat.parent.name} {text[text.find('(') + 1:comm_end]}")
    return alive


def execute(run: Run, delay: float | None) -> Run:
    """Start `run`, stop it the run's way (`run.stop`) after `delay` seconds (None: never), wait
    for it within the bounds; afterwards no process of its group may be left."""
    started = time.monotonic()
    out, err = run.cwd / "stdout.txt", run.cwd / "stderr.txt"  # files: a pipe could fill up
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(run.argv, cwd=run.cwd, env=run.env, stdout=stdout,
                                   stderr=stderr, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        if delay is not None:
            try:
                process.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                run.stop.send(process.pid)
        process.wait(timeout=RUN_BOUND_S if delay is None else EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"{run.argv[3:5]} did not exit within the bound (delay {delay})")
    run.code, run.seconds = process.returncode, time.monotonic() - started
    run.stdout, run.stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    deadline = time.monotonic() + 10
    while (left := _group_members(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"processes of the run left behind after exit {run.code}: {left}")
    return run


def containers(profile: str) -> list[docker.models.containers.Container]:
    return docker.from_env().containers.list(
        all=True, filters={"label": f"{labels.PROFILE}={profile}"}
    )


def traceback_in(stderr: str) -> bool:
    return any(line.startswith("Traceback (most recent call last)") for line in stderr.splitlines())


# --- each command: its run, and what must hold after it ------------------------------------------


def _profile(root: Path, prefix: str) -> tuple[Path, str]:
    """A copy of deploy/sim.yaml: own name and port, quick start and stop, fast decoding, no
    evals (the gate's smoke then runs its own checks only)."""
    data, name = sim_profile_data(prefix, free_port(), warmup_seconds="0.5")
    data["container"]["stop_grace_seconds"] = 2
    data.pop("eval", None)
    for variant in data["variants"].values():
        variant.setdefault("env", {})["OPSCTL_SIM_ITL_MS"] = "2"
    return write_profile(data, root), name


class Command:
    """A command under test: `make` gives a fresh run (own profile), `check` judges it."""

    name = ""
    finished_codes: tuple[int, ...] = (0,)

    def __init__(self, image: str, root: Path) -> None:
        self.image, self.root = image, root

    def folder(self) -> Path:
        path = self.root / uuid.uuid4().hex[:8]
        path.mkdir(parents=True)
        return path

    def env(self, folder: Path) -> dict[str, str]:
        return {**os.environ, "OPSCTL_STATE_DIR": str(folder / "state"), "PYTHONUNBUFFERED": "1"}

    def make(self) -> Run:
        raise NotImplementedError

    def check(self, run: Run) -> None:
        """What holds after any run, interrupted or not: no container of its profile."""
        assert containers(run.profile) == [], (run.profile, run.code, run.stdout, run.stderr)

    def cleanup(self, run: Run) -> None:
        if run.profile:
            remove_containers(run.profile)


def _opsctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "opsctl", *args]


class Decide(Command):
    name = "decide"

    def make(self) -> Run:
        folder = self.folder()
        path, profile = _profile(folder, "int-decide")
        out = folder / "run"
        return Run(_opsctl("decide", "--profile", str(path), "--variants", "baseline,gathercast",
                           "--concurrency", "1", "--requests", "2", "--repeats", "1",
                           "--skip-eval", "--timeout", "30", "--out", str(out), "--image",
                           self.image), folder, self.env(folder), profile, out)

    def check(self, run: Run) -> None:
        super().check(run)
        assert run.out is not None
        if run.code == run.interrupted and "[1/" in run.stderr:  # past the lock: a report is due
            report = json.loads((run.out / DECIDE_JSON).read_text())
            assert report["partial"] is True, report
            run.notes.append("partial report")


class Up(Command):
    """A plain `up`: interrupted, it removes the container it started; finished, its server
    runs (the deployment it was asked for)."""

    name = "up"

    def make(self) -> Run:
        folder = self.folder()
        path, profile = _profile(folder, "int-up")
        return Run(_opsctl("up", "--profile", str(path), "--variant", "baseline", "--timeout",
                           "30", "--image", self.image), folder, self.env(folder), profile)

    def check(self, run: Run) -> None:
        if run.code == 0:
            assert [c.status for c in containers(run.profile)] == ["running"], run.stdout
            return
        super().check(run)


class Gate(Command):
    """A first gate (no last good): Ctrl-C removes what it started and brings nothing back."""

    name = "gate"

    def make(self) -> Run:
        folder = self.folder()
        path, profile = _profile(folder, "int-gate")
        return Run(_opsctl("up", "--profile", str(path), "--variant", "baseline", "--gate",
                           "--timeout", "30", "--image", self.image),
                   folder, self.env(folder), profile, folder / "state")

    def check(self, run: Run) -> None:
        assert run.out is not None
        if run.code == 0:
            assert "gate passed" in run.stdout + run.stderr, run.stdout + run.stderr
            return
        super().check(run)
        assert not (run.out / "gates" / run.profile / "last-good.json").exists()
        for report in (run.out / "gates" / run.profile).glob("smoke-*.json"):
            assert json.loads(report.read_text())["partial"] is True, report
            run.notes.append("partial report")


class Tune(Command):
    name = "tune"

    def make(self) -> Run:
        folder = self.folder()
        path, profile = _profile(folder, "int-tune")
        out = folder / "tune"
        return Run(_opsctl("tune", "--profile", str(path), "--variant", "baseline", "--param",
                           "cuda_graph_max_bs=2,64", "--concurrency", "1", "--requests", "4",
                           "--input-words", "8", "--output-tokens", "4", "--request-timeout",
                           "20", "--image", self.image, "--out", str(out)),
                   folder, self.env(folder), profile, out)

    def check(self, run: Run) -> None:
        super().check(run)
        assert run.out is not None
        state = run.out / STATE_FILE
        if run.code == run.interrupted and state.exists():
            saved = json.loads(state.read_text())
            assert saved["interrupted"] is True and not saved["finished"], saved
            assert "--resume" in run.stderr, run.stderr
            run.notes.append("partial report")


class Capture(Command):
    """`trace capture` of a server the test started (its own profile copy, kept up for its
    timings): the capture starts no container, but it starts a profile on the server, which
    must not be left running (POST /stop_profile then answers "not in progress")."""

    name = "trace-capture"

    def __init__(self, image: str, root: Path) -> None:
        super().__init__(image, root)
        self.servers: dict[str, tuple[Path, str, str]] = {}  # thread -> (path, name, id)

    def server(self) -> tuple[Path, str, str]:
        import threading

        key = threading.current_thread().name
        if key not in self.servers:
            folder = self.folder()
            path, profile = _profile(folder, "int-trace")
            up = subprocess.run(_opsctl("up", "--profile", str(path), "--variant", "baseline",
                                        "--no-verify", "--image", self.image),
                                capture_output=True, text=True, timeout=RUN_BOUND_S, cwd=folder,
                                env=self.env(folder), stdin=subprocess.DEVNULL)
            assert up.returncode == 0, up.stdout + up.stderr
            (server,) = containers(profile)
            self.servers[key] = (path, profile, server.id)
        return self.servers[key]

    def make(self) -> Run:
        path, profile, _ = self.server()
        folder = self.folder()
        out = folder / "trace"
        return Run(_opsctl("trace", "capture", "--profile", str(path), "--concurrency", "2",
                           "--steps", "2", "--wait", "20", "--out", str(out)),
                   folder, self.env(folder), profile, out)

    def check(self, run: Run) -> None:
        assert run.out is not None
        path, profile, server_id = next(s for s in self.servers.values() if s[1] == run.profile)
        assert [c.id for c in containers(profile)] == [server_id]  # the test's server, only
        port = docker.from_env().containers.get(server_id).labels[labels.BASE_URL]
        answer = httpx.post(f"{port}/stop_profile", timeout=30)
        assert answer.status_code != 200, "the capture left the server profiling"
        if run.code == run.interrupted and (run.out / ANALYSIS_JSON).exists():
            report = json.loads((run.out / ANALYSIS_JSON).read_text())
            assert report["partial"] is True, report
            run.notes.append("partial report")

    def cleanup(self, run: Run) -> None:
        pass  # the servers go at the end of the batch

    def close(self) -> None:
        for _, profile, _ in self.servers.values():
            remove_containers(profile)


class Doctor(Command):
    """`doctor --json` with the FAKE nvidia-smi of tests/doctor_samples.py, so it asks the real
    engine for a throwaway GPU container (role verify: checked once the batch is done)."""

    name = "doctor"
    finished_codes = (0, EXIT_HOST)  # EXIT_HOST on a host without a GPU stack (this CI's)

    def make(self) -> Run:
        folder = self.folder()
        path, profile = _profile(folder, "int-doctor")
        tools = fake_tools(folder / "bin")
        env = {**self.env(folder), "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
        return Run(_opsctl("doctor", "-p", str(path), "--json"), folder, env, profile,
                   folder / "out")

    def check(self, run: Run) -> None:
        super().check(run)
        assert run.out is not None
        if run.code == run.interrupted:
            for report in run.out.glob("doctor-*.json"):
                assert json.loads(report.read_text())["partial"] is True, report
                run.notes.append("partial report")


COMMANDS: dict[str, type[Command]] = {c.name: c for c in (Up, Decide, Gate, Tune, Capture,
                                                           Doctor)}


def verify_containers() -> set[str]:
    return {c.id for c in docker.from_env().containers.list(
        all=True, filters={"label": f"{labels.ROLE}={labels.ROLE_VERIFY}"})}


@pytest.fixture()
def command(request: pytest.FixtureRequest, sim_image: str, tmp_path: Path) -> Iterator[Command]:
    made = COMMANDS[request.param](sim_image, tmp_path)
    yield made
    if isinstance(made, Capture):
        made.close()


STARTING = "error: interrupted ({by}) while starting\n"  # opsctl.entry's line


def in_interpreter_startup(run: Run) -> bool:
    """A signal before opsctl's code ran (the interpreter's own start-up, runpy finding
    opsctl/__main__, before SIGTERM and SIGHUP are taken): CPython dies by the signal or prints
    its own frozen-frames traceback; nothing of opsctl's ran, so nothing of it can be left.
    Counted apart."""
    lines = run.stderr.splitlines()
    frozen = bool(lines) and lines[0].startswith("Traceback") and lines[-1] == "KeyboardInterrupt" \
        and all("<frozen " in line for line in lines if line.strip().startswith("File "))
    starting = STARTING.format(by=INTERRUPTIONS[run.stop.signum][0])
    return run.code == -run.stop.signum and run.stderr in {"", starting} or frozen


def named_another_signal(run: Run) -> list[str]:
    """What the run's lines say interrupted it, where that is not its own signal."""
    own = INTERRUPTIONS[run.stop.signum][0]
    return [f"interrupted ({by})" for by, _ in INTERRUPTIONS.values()
            if by != own and f"interrupted ({by})" in run.stderr + run.stdout]


def _one(command: Command, delay: float | None, stop: Stop = STOPS[0]) -> Run:
    run = command.make()
    run.stop = stop
    try:
        execute(run, delay)
        if in_interpreter_startup(run):
            run.notes.append("interpreter start-up")
            return run
        assert not traceback_in(run.stderr), run.stderr
        assert run.code in {run.interrupted, *command.finished_codes}, (
            stop.name, delay, run.code, run.stderr)
        assert not named_another_signal(run), (stop.name, run.stderr)
        if run.code == run.interrupted:  # one line says so (typer alone once said nothing)
            assert any(line.startswith("error: ") for line in run.stderr.splitlines()), (
                stop.name, delay, run.stderr)
        command.check(run)
    finally:
        command.cleanup(run)
    return run


@pytest.mark.parametrize("command", list(COMMANDS), indirect=True)
def test_ctrl_c_at_random_points_leaves_nothing_and_a_partial_report(
        command: Command, capsys: pytest.CaptureFixture[str]) -> None:
    before = verify_containers()
    whole = _one(command, None)
    assert whole.code in command.finished_codes, whole.stdout + whole.stderr
    rng = random.Random(f"{command.name}-{SEED}")
    delays = [rng.uniform(0.2, 0.95 * whole.seconds) for _ in range(TIMINGS)]
    stops = [STOPS[i % len(STOPS)] for i in range(TIMINGS)]  # each way in turn
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="timing") as pool:
        runs = list(pool.map(lambda d, s: _one(command, d, s), delays, stops))
    finished = sum(run.code in command.finished_codes for run in runs)
    partial = sum("partial report" in run.notes for run in runs)
    startup = sum("interpreter start-up" in run.notes for run in runs)
    ways = ", ".join(f"{stop.name} {sum(r.stop is stop and r.code == r.interrupted for r in runs)}"
                     for stop in STOPS)
    with capsys.disabled():
        print(f"\n{command.name}: {len(runs)} timings over {whole.seconds:.1f} s (seed {SEED}): "
              f"{len(runs) - finished - startup} interrupted ({ways}; {partial} with a "
              "partial report), "
              f"{finished} finished before the signal, {startup} in the interpreter's start-up")
    assert finished + startup <= FINISHED_SHARE * len(runs), "most timings must land mid-run"
    assert verify_containers() <= before  # doctor's throwaway GPU containers are all gone
