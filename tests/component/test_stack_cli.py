"""`opsctl sglang-args stack` in a fresh process: a bad version is one line."""

from __future__ import annotations

import os
import subprocess
import sys


def test_cli_refuses_a_bad_version_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "opsctl", "sglang-args", "stack", "--version", "x;y"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "'x;y' is not a sglang version" in done.stderr
