"""Running a host tool (nvidia-smi, lspci) as a collaborator that never crashes its caller.

`host p2p` reads the GPU topology with it and bench samples GPU utilisation with it; both take
a `Run` argument so tests replace the tool with a function returning canned output.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

Run = Callable[[list[str]], tuple[int, str]]  # argv -> (exit code, stdout + stderr)


def run_tool(argv: list[str], timeout_s: float = 60) -> tuple[int, str]:
    """(exit code, stdout + stderr); a hung or unstartable tool is a failed run, not a crash."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {timeout_s:g} s (a hung driver?)"
    except OSError as exc:
        return 126, f"cannot run {argv[0]}: {exc.strerror or exc}"
    return done.returncode, done.stdout + done.stderr
