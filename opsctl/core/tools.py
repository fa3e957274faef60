"""Running a host tool (nvidia-smi, lspci) as a collaborator that never crashes its caller and
never holds it past a deadline or fills its memory.

`host p2p` reads the GPU topology with it, `doctor` runs its tools through it and bench samples
GPU utilisation with it; each takes a `Run` argument so tests replace the tool with a function
returning canned output.

Bounded: the tool runs in its own session; its output (stdout and stderr together) is read as
it comes, at most MAX_OUTPUT_BYTES of it, until `timeout_s` has passed. A tool that writes
more, or does not finish in time, is killed with everything it started (its process group)
and reported as a failed run (TOO_MUCH_OUTPUT, TIMED_OUT): never waited for past the
deadline, never read whole. A tool's last line, as an error quotes it, is `last_line`: one
printable line of at most LINE_CHARS characters.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable

from opsctl.core.text import printable

Run = Callable[[list[str]], tuple[int, str]]  # argv -> (exit code, stdout + stderr)

MAX_OUTPUT_BYTES = 1 << 20  # nvidia-smi and lspci -vvv of an 8-GPU host write a few 10 kB
LINE_CHARS = 200
TIMED_OUT, TOO_MUCH_OUTPUT, CANNOT_RUN = 124, 125, 126  # GNU timeout's and the shells' codes
_CHUNK = 1 << 16


def run_tool(argv: list[str], timeout_s: float = 60,
             max_bytes: int = MAX_OUTPUT_BYTES) -> tuple[int, str]:
    """(exit code, stdout + stderr); a hung, unstartable or too talkative tool is a failed run
    (TIMED_OUT, CANNOT_RUN, TOO_MUCH_OUTPUT with a line saying so), not a crash."""
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    except (OSError, ValueError) as exc:  # missing, not executable, a NUL byte in argv
        return CANNOT_RUN, f"cannot run {argv[0]}: {getattr(exc, 'strerror', None) or exc}"
    deadline = time.monotonic() + timeout_s
    try:
        output, over = _collect(process, deadline, max_bytes)
        code = None if over else _wait(process, deadline)
    finally:
        _stop(process)
    if over or code is None:
        if over:
            return TOO_MUCH_OUTPUT, f"{argv[0]} wrote more than {max_bytes} bytes: stopped"
        return TIMED_OUT, f"no answer within {timeout_s:g} s (a hung driver?)"
    return code, output.decode(errors="replace")


def _collect(process: subprocess.Popen[bytes], deadline: float,
             max_bytes: int) -> tuple[bytes, bool]:
    """(what the tool wrote until its end of output or the deadline, whether it passed the cap)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                continue
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return b"", True
    return b"".join(chunks), False


def _wait(process: subprocess.Popen[bytes], deadline: float) -> int | None:
    try:
        return process.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the tool's session (a tool that ended leaves nothing to kill)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


def last_line(output: str, limit: int = LINE_CHARS) -> str:
    """The last non-empty line of a tool's output as an error quotes it: printable, at most
    `limit` characters ("no output" when there is none)."""
    lines = output.strip().splitlines()
    line = printable(lines[-1].strip()) if lines else "no output"
    return line if len(line) <= limit else line[:limit] + "..."
