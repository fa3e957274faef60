"""The console script's guard: a Ctrl-C while the CLI is still being imported is one line and
exit 130, never Python's KeyboardInterrupt traceback (issue 25, item 5). The real-process cases
(CPython's own ways to lose a Ctrl-C or override exit 130) are in
tests/component/test_entry_signals.py."""

from __future__ import annotations

import os
import signal
import sys
import time
import types
from collections.abc import Iterator

import pytest

from opsctl import entry
from opsctl.core import errors
from opsctl.core.errors import EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_TERMINATED

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _handlers_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`entry.main` takes SIGTERM and SIGHUP, and ignores all three interrupting signals on its
    way out (the process exits next); the test session keeps its own handlers, and no signal a
    test sent is remembered by the next."""
    monkeypatch.setattr(errors, "_received", [])
    handlers = {signum: signal.getsignal(signum) for signum in SIGNALS}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


class _Importing(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        raise KeyboardInterrupt  # the Ctrl-C lands while `from opsctl.cli import main` runs


def test_ctrl_c_while_the_cli_is_imported_is_exit_130_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "opsctl.cli", _Importing("opsctl.cli"))
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # main() installs its own
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
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
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
    errors.handle_termination()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is errors.interrupt


def test_sigterm_goes_the_way_a_ctrl_c_goes_at_that_moment() -> None:
    """SIGTERM calls SIGINT's handler of the moment (asyncio.run's cancels its task first;
    InterruptGuard's counts a second one): one path for both, the first signal remembered."""
    called: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _: called.append(signum))
    errors.interrupt(signal.SIGTERM, None)
    errors.interrupt(signal.SIGHUP, None)
    assert called == [signal.SIGINT, signal.SIGINT]
    assert errors.interrupted_by() == "SIGTERM" and errors.interrupting_signal() == signal.SIGTERM
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # SIGINT ignored when opsctl started
    with pytest.raises(KeyboardInterrupt):
        errors.interrupt(signal.SIGTERM, None)


def test_a_terminated_run_exits_143_and_says_sigterm_at_the_top_and_in_a_report(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    from opsctl.core.errors import stop_error, stop_reason

    assert stop_error(KeyboardInterrupt(), "bench", "out").exit_code == EXIT_INTERRUPTED
    errors.note_interruption(signal.SIGTERM)
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


class _ImportingSetName(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        # CPython 3.11 wraps what a class's __set_name__ raises (CI's gate Ctrl-C module, seed 6:
        # pydantic's DecoratorInfos while the CLI imported).
        raise RuntimeError("Error calling __set_name__ on 'Field' instance 'validators' in "
                           "'DecoratorInfos'") from KeyboardInterrupt()


def test_ctrl_c_wrapped_by_set_name_while_the_cli_is_imported_is_exit_130_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "opsctl.cli", _ImportingSetName("opsctl.cli"))
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    with pytest.raises(SystemExit) as stopped:
        entry.main()
    assert stopped.value.code == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C) while starting\n"


class _ImportingBug(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        raise RuntimeError("a bug of opsctl's own")


def test_a_runtime_error_while_the_cli_is_imported_is_a_bug_with_its_traceback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opsctl.cli", _ImportingBug("opsctl.cli"))
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    with pytest.raises(RuntimeError, match="a bug of opsctl's own"):
        entry.main()


def _wrapped_ctrl_c() -> RuntimeError:
    wrapped = RuntimeError("Error calling __set_name__")
    wrapped.__cause__ = KeyboardInterrupt()
    return wrapped


def test_a_wrapped_ctrl_c_is_exit_130_where_a_run_is_judged_and_at_the_top(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from opsctl.core.errors import stop_error, stop_reason
    from opsctl.core.failures import as_opsctl_error

    assert stop_reason(_wrapped_ctrl_c()) == "interrupted (Ctrl-C)"
    assert stop_error(_wrapped_ctrl_c(), "bench", "out").exit_code == EXIT_INTERRUPTED
    # Not a failure a per-check guard may turn into a row (doctor's): only the top maps it.
    assert as_opsctl_error(_wrapped_ctrl_c()) is None
    assert as_opsctl_error(RuntimeError("a bug")) is None

    def interrupted() -> None:
        raise _wrapped_ctrl_c()

    cli_app = importlib.import_module("opsctl.cli.app")  # the module (opsctl.cli.app is typer's)
    monkeypatch.setattr(cli_app, "app", interrupted)
    with pytest.raises(SystemExit) as stopped:
        cli_app.main()
    assert stopped.value.code == EXIT_INTERRUPTED
