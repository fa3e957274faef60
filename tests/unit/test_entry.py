"""The console script's guard: a Ctrl-C while the CLI is still being imported is one line and
exit 130, never Python's KeyboardInterrupt traceback (issue 25, item 5). The real-process cases
(CPython's own ways to lose a Ctrl-C or override exit 130) are in
tests/component/test_entry_signals.py."""

from __future__ import annotations

import sys
import types

import pytest

from opsctl import entry
from opsctl.core.errors import EXIT_INTERRUPTED


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


def test_the_console_script_and_python_m_run_the_guard() -> None:
    import tomllib

    from opsctl.core.paths import project_root

    project = tomllib.loads((project_root() / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["opsctl"] == "opsctl.entry:main"
    assert "from opsctl.entry import main" in (project_root() / "opsctl" / "__main__.py").read_text()
