"""docs/cli.md is every command's --help, generated: a command or option changed without
regenerating it fails here (and in scripts/lint.sh)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _generator():  # scripts/ is not a package
    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "scripts" / "cli_reference.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_is_the_current_help() -> None:
    text = _generator().render()
    assert (ROOT / "docs" / "cli.md").read_text() == text, \
        "docs/cli.md is stale: run python3 scripts/cli_reference.py"
    assert "## `opsctl profile show`" in text and "## `opsctl sglang-args stack`" in text


def test_no_command_summary_stops_inside_an_abbreviation() -> None:
    # click cuts a summary at the first ". ": "e.g. --model-path" made `sim`'s read "(e.g.".
    in_commands = False
    for line in _generator().render().splitlines():
        in_commands = line == "Commands:" or (in_commands and line.startswith("  "))
        if in_commands and line.startswith("  "):
            assert not line.rstrip().endswith(("(e.g.", "(i.e.", " e.g.", " i.e.")), line
