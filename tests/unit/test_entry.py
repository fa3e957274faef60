"""The console script's guard: a Ctrl-C while the CLI is still being imported is one line and
exit 130, never Python's KeyboardInterrupt traceback (issue 25, item 5). The real-process cases
(CPython's own ways to lose a Ctrl-C or override exit 130) are in
tests/component/test_entry_signals.py."""

from __future__ import annotations

import signal
import sys
import types
from collections.abc import Iterator

import pytest

from opsctl import entry
from opsctl.core.errors import EXIT_INTERRUPTED


@pytest.fixture(autouse=True)
def _sigint_handler_kept() -> Iterator[None]:
    """`entry.main` ignores SIGINT on its way out (the process exits next); the test session
    keeps its own handler."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


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
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # the exit is chosen: no late Ctrl-C


def test_the_console_script_and_python_m_run_the_guard() -> None:
    import tomllib

    from opsctl.core.paths import project_root

    project = tomllib.loads((project_root() / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["opsctl"] == "opsctl.entry:main"
    assert "from opsctl.entry import main" in (project_root() / "opsctl" / "__main__.py").read_text()


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
