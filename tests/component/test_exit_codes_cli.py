"""`opsctl --help` in a fresh process lists every exit code once."""

from __future__ import annotations

import re
import subprocess
import sys

from opsctl.core import errors


def test_help_lists_every_code_once() -> None:
    run = subprocess.run([sys.executable, "-m", "opsctl", "--help"], capture_output=True,
                         text=True, check=False)
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.replace("│", " ").split())
    for code in errors.EXIT_CODES:
        assert re.search(rf"[:;] {code.code} {re.escape(code.meaning)}[;.]", text), code
