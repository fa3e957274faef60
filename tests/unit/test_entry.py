"""The console script's guard: a Ctrl-C while the CLI is still being imported is one line and
exit 130, never Python's KeyboardInterrupt traceback (issue 25, item 5); opsctl's handlers raise
a Ctrl-C only where Python can raise it (core.interrupts). The real-process cases (CPython's own
ways to lose a Ctrl-C or override exit 130) are in tests/component/test_entry_signals.py."""

from __future__ import annotations

import os
import signal
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from opsctl import entry
from opsctl.core import interrupts
from opsctl.core.errors import EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_TERMINATED

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _handlers_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`entry.main` takes SIGTERM and SIGHUP, and ignores all three interrupting signals on its
    way out (the process exits next); the test session keeps its own handlers, and no signal a
    test sent is remembered by the next, nothing is left armed. Each test starts from Python's
    own SIGINT handler, as opsctl starts from a terminal: a pytest run as a background job
    starts with SIGINT ignored, which `arm` keeps (tested below)."""
    monkeypatch.setattr(interrupts, "_received", [])
    hook = sys.unraisablehook
    handlers = {signum: signal.getsignal(signum) for signum in SIGNALS}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    with interrupts._lock:
        interrupts._state["armed"] = False
    sys.unraisablehook = hook
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


class _Importing(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        raise KeyboardInterrupt  # the Ctrl-C lands while `from opsctl.cli import main` runs


def test_ctrl_c_while_the_cli_is_imported_is_exit_130_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "opsctl.cli", _Importing("opsctl.cli"))
    with pytest.raises(SystemExit) as stopped:
        entry.main()
    assert stopped.value.code == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C) while starting\n"
    for signum in SIGNALS:  # the exit is chosen: no late Ctrl-C, SIGTERM or SIGHUP
        assert signal.getsignal(signum) is signal.SIG_IGN


class _ImportingUntil(types.ModuleType):
    """The signal `signum` reaches the process while `from opsctl.cli import main` runs."""

    def __init__(self, signum: int) -> None:
        super().__init__("opsctl.cli")
        self.signum = signum

    def __getattr__(self, name: str) -> object:
        os.kill(os.getpid(), self.signum)
        time.sleep(10)  # the handler runs here
        raise AssertionError("the signal did not interrupt the import")


@pytest.mark.parametrize(("signum", "code", "by"), [(signal.SIGTERM, EXIT_TERMINATED, "SIGTERM"),
                                                    (signal.SIGHUP, EXIT_HANGUP, "SIGHUP")])
def test_sigterm_or_sighup_while_the_cli_is_imported_is_one_line_and_128_plus_the_signal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signum: int,
        code: int, by: str) -> None:
    """Termination is interruption (issue 37): without opsctl's handler the process (here the
    test session) dies by the signal, with no line and nothing cleaned up."""
    monkeypatch.setitem(sys.modules, "opsctl.cli", _ImportingUntil(signum))
    for taken in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(taken, signal.SIG_DFL)  # as a process starts
    with pytest.raises(SystemExit) as stopped:
        entry.main()
    assert stopped.value.code == code == 128 + signum
    assert capsys.readouterr().err == f"error: interrupted ({by}) while starting\n"


def test_a_signal_ignored_when_opsctl_starts_stays_ignored() -> None:
    """`nohup opsctl decide ...`: a closed terminal must not stop it."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    interrupts.arm()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is interrupts.interrupt


def test_sigterm_goes_the_way_a_ctrl_c_goes_at_that_moment() -> None:
    """SIGTERM calls SIGINT's handler of the moment (asyncio.run's cancels its task first;
    InterruptGuard's counts a second one): one path for both, the first signal remembered. The
    handler is told which signal it was (InterruptGuard keeps a SIGINT ignored at start ignored,
    not a SIGTERM)."""
    called: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _: called.append(signum))
    interrupts.interrupt(signal.SIGTERM, None)
    interrupts.interrupt(signal.SIGHUP, None)
    assert called == [signal.SIGTERM, signal.SIGHUP]
    assert interrupts.interrupted_by() == "SIGTERM"
    assert interrupts.interrupting_signal() == signal.SIGTERM
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # SIGINT ignored when opsctl started
    with pytest.raises(KeyboardInterrupt):
        interrupts.interrupt(signal.SIGTERM, None)


def test_a_terminated_run_exits_143_and_says_sigterm_at_the_top_and_in_a_report(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    from opsctl.core.errors import stop_error, stop_reason

    assert stop_error(KeyboardInterrupt(), "bench", "out").exit_code == EXIT_INTERRUPTED
    interrupts.note_interruption(signal.SIGTERM)
    assert stop_reason(KeyboardInterrupt()) == "interrupted (SIGTERM)"
    stopped_run = stop_error(KeyboardInterrupt(), "bench", "out")
    assert stopped_run.exit_code == EXIT_TERMINATED
    assert stopped_run.message.startswith("bench interrupted (SIGTERM); ")

    cli_app = importlib.import_module("opsctl.cli.app")
    commands = cli_app.command_group("a group as opsctl's")

    @commands.command()
    def up() -> None:
        raise KeyboardInterrupt  # escapes the command: typer itself would exit 130, no line

    @commands.command()
    def down() -> None:
        pass

    monkeypatch.setattr(sys, "argv", ["opsctl", "up"])
    monkeypatch.setattr(cli_app, "app", commands)
    with pytest.raises(SystemExit) as stopped:
        cli_app.main()
    assert stopped.value.code == EXIT_TERMINATED
    assert capsys.readouterr().err.splitlines()[0] == "error: interrupted (SIGTERM)"


def test_the_console_script_and_python_m_run_the_guard() -> None:
    import tomllib

    from opsctl.core.paths import project_root

    project = tomllib.loads((project_root() / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["opsctl"] == "opsctl.entry:main"
    assert (
        "from opsctl.entry import main" in (project_root() / "opsctl" / "__main__.py").read_text()
    )


class _ImportingBug(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        raise RuntimeError("a bug of opsctl's own")


def test_a_runtime_error_while_the_cli_is_imported_is_a_bug_with_its_traceback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opsctl.cli", _ImportingBug("opsctl.cli"))
    with pytest.raises(RuntimeError, match="a bug of opsctl's own"):
        entry.main()




class _SignalsWhileNamed:
    """A descriptor whose `__set_name__` is running when the Ctrl-C arrives (pydantic and
    dataclasses build classes with such fields while the CLI imports)."""

    def __set_name__(self, owner: type, name: str) -> None:
        signal.raise_signal(signal.SIGINT)
        sum(range(1000))  # the handler runs in here


def _build_a_class() -> None:
    class Model:
        field = _SignalsWhileNamed()


def _raised_where(caught: pytest.ExceptionInfo[BaseException]) -> list[str]:
    return [step.name for step in caught.traceback]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="CPython 3.12 stopped wrapping it")
def test_a_ctrl_c_inside_set_name_is_a_runtime_error_under_pythons_own_handler() -> None:
    """What opsctl's handler avoids (CI's gate Ctrl-C module, seed 6, once hit it: a
    traceback instead of exit 130)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(RuntimeError, match="__set_name__") as caught:
        _build_a_class()
    assert isinstance(caught.value.__cause__, KeyboardInterrupt)


def test_a_ctrl_c_inside_set_name_is_raised_once_the_class_is_built() -> None:
    interrupts.arm()
    with pytest.raises(KeyboardInterrupt) as caught:
        _build_a_class()
        time.sleep(5)  # sent again 50 ms later: it lands here
    assert not {"__set_name__", "_build_a_class"} & set(_raised_where(caught))


def test_a_ctrl_c_inside_code_from_a_string_is_raised_after_it() -> None:
    """Raised inside exec'd code, CPython would kill the process with SIGINT at exit (the real
    process: tests/component/test_entry_signals.py)."""
    interrupts.arm()
    with pytest.raises(KeyboardInterrupt) as caught:
        exec("import signal\nsignal.raise_signal(signal.SIGINT)\nsum(range(1000))")  # noqa: S102
        time.sleep(5)
    assert "<module>" not in _raised_where(caught)  # exec'd code's frame


def test_a_ctrl_c_while_a_module_is_imported_is_raised_once_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Classes are built while a module imports, and their builders wrap what they call (seed 43
    of the integration Ctrl-C module: pydantic-core's SchemaError caused by the Ctrl-C, a
    traceback): the import finishes first."""
    import importlib

    (tmp_path / "built_on_import.py").write_text(
        "import signal\nsignal.raise_signal(signal.SIGINT)\nDONE = sum(range(1000))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "built_on_import", raising=False)
    interrupts.arm()
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module("built_on_import")
        time.sleep(5)
    assert sys.modules["built_on_import"].DONE == 499500


def test_a_ctrl_c_is_deferred_for_a_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Code from a string that never ends does not keep a Ctrl-C away for ever."""
    monkeypatch.setattr(interrupts, "MAX_DEFER_S", 0.15)
    interrupts.arm()
    with pytest.raises(KeyboardInterrupt) as caught:
        exec("import signal, time\nsignal.raise_signal(signal.SIGINT)\ntime.sleep(5)")  # noqa: S102
    assert "<module>" in _raised_where(caught)  # raised inside it: the deferral gave up


def test_arming_twice_keeps_the_hook_it_replaced() -> None:
    before = sys.unraisablehook
    interrupts.arm()
    interrupts.arm()
    interrupts.disarm()
    assert sys.unraisablehook is before
    for signum in SIGNALS:  # the exit is chosen: no late Ctrl-C, SIGTERM or SIGHUP
        assert signal.getsignal(signum) is signal.SIG_IGN


def test_under_opsctls_handler_asyncio_still_cancels_its_task_first() -> None:
    """`run_async`: asyncio's own first-Ctrl-C handling (cancel the main task: its clean-ups run
    at an await), which it installs only over Python's default handler."""
    import asyncio

    interrupts.arm()
    cleaned: list[str] = []

    async def main() -> None:
        try:
            signal.raise_signal(signal.SIGINT)
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cleaned.append("cancelled at the await")
            raise

    with pytest.raises(KeyboardInterrupt):
        interrupts.run_async(main())
    assert cleaned == ["cancelled at the await"]
    assert signal.getsignal(signal.SIGINT) is interrupts.on_sigint


def test_a_ctrl_c_while_typer_parses_the_options_is_one_line_and_the_signals_code(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """typer turns a KeyboardInterrupt anywhere in its main into a silent exit 130 (CI's doctor
    Ctrl-C timing hit it in the root's option parsing: SIGTERM there exited 130, no line)."""
    import importlib

    import typer

    cli_app = importlib.import_module("opsctl.cli.app")
    commands = cli_app.command_group("a group as opsctl's")

    def interrupted_while_parsing(value: bool) -> None:
        raise KeyboardInterrupt

    @commands.callback()
    def root(flag: bool = typer.Option(False, "--flag", is_eager=True,
                                       callback=interrupted_while_parsing)) -> None:
        pass

    @commands.command()
    def doctor() -> None:
        pass

    interrupts.note_interruption(signal.SIGTERM)
    monkeypatch.setattr(sys, "argv", ["opsctl", "doctor"])
    monkeypatch.setattr(cli_app, "app", commands)
    with pytest.raises(SystemExit) as stopped:
        cli_app.main()
    assert stopped.value.code == EXIT_TERMINATED
    assert capsys.readouterr().err.splitlines()[0] == "error: interrupted (SIGTERM)"


def test_a_ctrl_c_inside_a_held_section_is_raised_when_it_ends() -> None:
    interrupts.arm()
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held():
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.3)  # sent again every 50 ms: none lands in here
            done.append("the section ran to its end")
        time.sleep(5)
    assert done == ["the section ran to its end"]


def _first_send_dropped(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each signal the module sends again, recorded; the first is dropped, as CPython dropped
    one that landed after the main thread released the GIL for a blocking call and before the
    call blocked (the stress run of the component module: a `sleep(30)` in a finalizer went on
    to its end, 4 runs in 720)."""
    sent: list[int] = []
    real = signal.pthread_kill

    def kill(thread: int, signum: int) -> None:
        sent.append(signum)
        if len(sent) > 1:
            real(thread, signum)
    monkeypatch.setattr(interrupts.signal, "pthread_kill", kill)
    return sent


def test_a_ctrl_c_sent_again_that_no_handler_ran_for_is_sent_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    interrupts.arm()
    sent = _first_send_dropped(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held():
            signal.raise_signal(signal.SIGINT)
        time.sleep(5)
    assert sent[:2] == [signal.SIGINT, signal.SIGINT]


def test_a_ctrl_c_sent_again_to_another_handler_is_sent_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another handler (asyncio's) does not count its runs, and a second signal is a second
    Ctrl-C to it."""
    interrupts.arm()
    sent = _first_send_dropped(monkeypatch)
    with interrupts.held():
        signal.raise_signal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda *_: None)
    time.sleep(0.5)
    assert sent == [signal.SIGINT]


def test_a_ctrl_c_sent_again_to_asyncio_is_not_sent_again_once_it_is_done(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C deferred just before `run_async` reaches asyncio's handler, which cancels the
    task and counts nothing; run_async then puts opsctl's handler back, and a send repeated to
    that one was a second Ctrl-C inside the clean-up after the first (an adversarial review, 5
    of 5 child runs: a partial report's write cut short)."""
    import asyncio

    interrupts.arm()
    monkeypatch.setattr(interrupts, "RESEND_S", 0.3)  # the loop runs by the first send

    async def forever() -> None:
        await asyncio.sleep(5)

    with pytest.raises(KeyboardInterrupt):
        with interrupts.held():
            signal.raise_signal(signal.SIGINT)
        interrupts.run_async(forever())
    try:
        time.sleep(1)  # the clean-up: a second send would land in here
    except KeyboardInterrupt:
        pytest.fail("one Ctrl-C, two KeyboardInterrupts")


def test_a_ctrl_c_while_the_event_loop_closes_leaves_it_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside `loop.close()` it left the loop half closed, and the loop's finalizer printed a
    traceback at exit (seed 7 of the integration Ctrl-C module, `decide` under SIGTERM)."""
    import asyncio

    closing = asyncio.Runner.close
    loops: list[asyncio.AbstractEventLoop] = []

    def close_with_a_ctrl_c(runner: asyncio.Runner) -> None:
        loops.append(runner.get_loop())
        signal.raise_signal(signal.SIGINT)
        closing(runner)

    async def main() -> int:
        return 1

    monkeypatch.setattr(asyncio.Runner, "close", close_with_a_ctrl_c)
    interrupts.arm()
    with pytest.raises(KeyboardInterrupt):
        interrupts.run_async(main())
        time.sleep(5)
    assert loops[0].is_closed()


def test_a_ctrl_c_while_a_chart_is_drawn_waits_for_the_chart() -> None:
    """matplotlib's compiled transforms turned one landing in their argument conversion into a
    TypeError traceback (the CI rehearsal's decide under SIGTERM): charts are drawn whole."""
    from opsctl.core.plotting import drawing

    drawn: list[str] = []

    @drawing
    def chart() -> str:
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.3)
        drawn.append("whole")
        return "chart.png"

    interrupts.arm()
    with pytest.raises(KeyboardInterrupt):
        assert chart() == "chart.png"
        time.sleep(5)
    assert drawn == ["whole"]
