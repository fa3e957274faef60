"""Which run owns a profile's server: a per-profile lock, a per-run id, and Ctrl-C during cleanup.

- **The lock.** `up`, `down` and `up --gate` hold `<state dir>/locks/<profile>.lock` (flock)
  while they change a profile's containers. A second run is refused at once with one line
  naming the holder, not queued: an `up` may wait an hour for readiness, and a run that
  blocked that long and then acted on a state it never saw would be worse than a clear "busy".
  The kernel drops the lock when its process ends, however it ends, so it never goes stale. It
  is re-entrant within a process (a gate's `down` and `up` run under the gate's lock).
- **The run id.** Every `up` labels its container `opsctl.run-id=<random>`; its cleanup
  removes only containers with its own id, so a run never takes another run's server (one that
  raced it from another state directory, or a later one) for its leftover.
- **Ctrl-C.** While a run cleans up after itself, a Ctrl-C no longer interrupts it at a random
  point: the first Ctrl-C starts the cleanup, a second one raises `SecondInterrupt`, which the
  cleanup takes as "leave what is left as it is" and names it. SIGTERM and SIGHUP count as
  Ctrl-C here: `core.interrupts.interrupt` hands them to the SIGINT handler of the moment, this one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import IO

from opsctl.core import interrupts
from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.core.errors import LaunchError
from opsctl.core.interrupts import SecondInterrupt
from opsctl.deploy.state import StateDir

# Locks this process holds: path -> (open file, depth), so nested holders share one flock.
_held: dict[Path, tuple[IO[str], int]] = {}
_held_guard = threading.Lock()


def new_run_id() -> str:
    """The `opsctl.run-id` label of one run: 96 random bits."""
    return secrets.token_hex(12)


class ProfileBusy(LaunchError):
    """Another opsctl process holds the profile's lock (exit 4; nothing was touched)."""


@contextlib.contextmanager
def profile_locks(state: StateDir | None, profiles: Iterable[str], command: str,
                  clock: Clock = SYSTEM_CLOCK) -> Iterator[None]:
    """Hold the locks of `profiles` (in name order) while `command` runs; ProfileBusy, before
    anything is touched, when another process holds one. Without a state directory (a caller
    that keeps no state) nothing is locked."""
    with contextlib.ExitStack() as stack:
        if state is not None:
            for profile in sorted(set(profiles)):
                stack.enter_context(_lock(state.lock_path(profile), profile, command, clock))
        yield


@contextlib.contextmanager
def _lock(path: Path, profile: str, command: str, clock: Clock) -> Iterator[None]:
    with _held_guard:
        held = _held.get(path)
        if held is not None:
            _held[path] = (held[0], held[1] + 1)
        else:
            _held[path] = (_acquire(path, profile, command, clock), 1)
    try:
        yield
    finally:
        with _held_guard:
            handle, depth = _held[path]
            if depth > 1:
                _held[path] = (handle, depth - 1)
            else:
                del _held[path]
                handle.close()  # closing the file drops the flock


def _acquire(path: Path, profile: str, command: str, clock: Clock) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    # Closed on any way out but the return, a Ctrl-C while the holder is written included: an
    # open handle would hold the flock until the process ends, and this run's own next `down`
    # (tune finishes a `down` a Ctrl-C cut short) would find its profile busy.
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = " ".join(handle.read(200).split()) or "another opsctl run"
            raise ProfileBusy(
                f"profile {profile!r} is busy: {holder} is changing it",
                hint="wait for that run to end, or stop it (Ctrl-C); the lock is released when "
                "its process ends",
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"`opsctl {command}` (pid {os.getpid()}, since "
                     f"{clock.now().isoformat(timespec='seconds')})\n")
        handle.flush()
    except BaseException:
        handle.close()
        raise
    return handle


class InterruptGuard:
    """While active (a context manager; main thread only, elsewhere it does nothing): the first
    SIGINT raises KeyboardInterrupt as Python's own handler does and marks the run as cleaning
    up; any SIGINT while cleaning up raises SecondInterrupt instead. A failure that is not a
    Ctrl-C starts the cleanup with `cleaning()`. SIGTERM and SIGHUP reach it as SIGINT does
    (`core.interrupts.arm`): a SIGTERM, then a second one, is the same pair. A SIGINT ignored
    when opsctl started (a background job) stays ignored here too."""

    def __init__(self) -> None:
        self.is_cleaning = False
        self._previous: signal.Handlers | object | None = None
        self._sigint_ignored = False

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._sigint_ignored = self._previous == signal.SIG_IGN
        return self

    def __exit__(self, *_: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]
            self._previous = None

    def cleaning(self) -> None:
        self.is_cleaning = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self._sigint_ignored:
            return
        interrupts.note_interruption(signum)  # a Ctrl-C first: the exit code and line say so
        if interrupts.deferred(frame):  # where Python cannot raise it: it comes again
            return
        counted = interrupts.redelivered()  # a lost one sent again: this handler counted it
        if self.is_cleaning and not counted:
            raise SecondInterrupt
        self.is_cleaning = True
        raise KeyboardInterrupt
