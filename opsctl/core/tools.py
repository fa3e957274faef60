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
printable line of at most LINE_CHARS characters. A long step whose output is shown as it comes
(debootstrap, tar: image/baseimage) runs through `run_lines`: the same session and deadline,
each line handed on cut at MAX_LINE_CHARS.
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
MAX_LINE_CHARS = 4096  # a line `run_lines` hands on
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


def run_lines(argv: list[str], timeout_s: float, on_line: Callable[[str], None],
              line_chars: int = MAX_LINE_CHARS) -> int:
    """Run a long tool (debootstrap, tar) handing each line of its output to `on_line` as it
    comes, a line longer than `line_chars` cut there (the rest of it dropped): memory stays
    bounded whatever it writes. Its exit code; TIMED_OUT when it outlives `timeout_s` (killed
    with its session, also on Ctrl-C), CANNOT_RUN when it cannot start (the reason a line)."""
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    except (OSError, ValueError) as exc:
        on_line(f"cannot run {argv[0]}: {getattr(exc, 'strerror', None) or exc}")
        return CANNOT_RUN
    deadline = time.monotonic() + timeout_s
    lines = _Lines(on_line, line_chars)
    try:
        ended = _pump(process, deadline, lines.feed)
        lines.flush()
        code = _wait(process, deadline) if ended else None
    finally:
        _stop(process)
    if code is None:
        on_line(f"no end within {timeout_s:g} s: stopped")
        return TIMED_OUT
    return code


class _Lines:
    """Bytes in, whole decoded lines out, each at most `limit` characters."""

    def __init__(self, on_line: Callable[[str], None], limit: int) -> None:
        self.on_line, self.limit = on_line, limit
        self.pending = b""
        self.cut = False  # the current line was handed on at its limit: drop the rest

    def feed(self, chunk: bytes) -> None:
        *whole, self.pending = (self.pending + chunk).split(b"\n")
        for line in whole:
            if not self.cut:
                self._emit(line)
            self.cut = False
        if len(self.pending) > 4 * self.limit:  # a UTF-8 character is at most 4 bytes
            if not self.cut:
                self._emit(self.pending)
            self.pending, self.cut = b"", True

    def flush(self) -> None:
        if self.pending and not self.cut:
            self._emit(self.pending)
        self.pending = b""

    def _emit(self, line: bytes) -> None:
        self.on_line(line.decode(errors="replace").rstrip("\r")[:self.limit])


def _pump(process: subprocess.Popen[bytes], deadline: float,
          take: Callable[[bytes], None]) -> bool:
    """Hand the tool's output to `take` until its end (True) or the deadline (False)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                continue
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                return True
            take(chunk)
    return False


def _collect(process: subprocess.Popen[bytes], deadline: float,
             max_bytes: int) -> tuple[bytes, bool]:
    """(what the tool wrote until its end of output or the deadline, whether it passed the cap)."""
    chunks: list[bytes] = []
    size = 0

    def take(chunk: bytes) -> None:
        nonlocal size
        size += len(chunk)
        if size > max_bytes:
            raise _TooMuch
        chunks.append(chunk)

    try:
        _pump(process, deadline, take)
    except _TooMuch:
        return b"", True
    return b"".join(chunks), False


class _TooMuch(Exception):
    """The tool wrote past the cap (stops the pump)."""


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
