"""The console script and `python -m opsctl`: the CLI, imported under a Ctrl-C guard.

First of all SIGTERM and SIGHUP are taken as Ctrl-C (`core.errors.handle_termination`): a run
that `kill`, `timeout`, `systemctl stop`, a cancelled CI job or a closed terminal stops cleans
up as after a Ctrl-C, and exits 143 or 129 (issue 37). Everything below about a Ctrl-C holds
for them too. Before that (the interpreter starting) such a signal ends the process as
usual: nothing of opsctl's has run.

Importing the CLI takes a moment (typer, rich, every room's declarations); a Ctrl-C in that
moment was Python's own KeyboardInterrupt traceback and a death by SIGINT instead of one line
and exit 130 (issue 25, item 5). Nothing heavy is imported here.

Three ways CPython itself could still turn a Ctrl-C into something else, both measured by
tests/integration/test_interrupt_points.py and reproduced in tests/unit/test_entry.py:

- A KeyboardInterrupt raised where Python cannot raise it (a weakref callback inside the import
  machinery, a `__del__`) is printed as "Exception ignored in ..." with a traceback, and the
  Ctrl-C is lost. The unraisable hook below raises it again in the main thread, as the same
  type, from a helper thread a moment later (raised inside the hook, it would be unraisable
  again), as an asynchronous exception rather than a second signal: the SIGINT handler already
  ran once for this Ctrl-C (deploy.ownership.InterruptGuard counts a second run as a second
  Ctrl-C). Only a KeyboardInterrupt is raised again. It is armed only while the CLI runs:
  `main` disarms it (and clears a pending one)
  on its way out, so nothing lands after opsctl chose its exit, and at interpreter shutdown
  the previous hook reports as before. A corner left: a first Ctrl-C lost this way and a real
  second one within those 50 ms give the guard's second-Ctrl-C clean-up a KeyboardInterrupt.
- A KeyboardInterrupt that passes through `exec()` of a string (dataclasses, namedtuple and
  pydantic build functions that way, at import and at run time) sets the interpreter's
  "unhandled KeyboardInterrupt" flag; CPython then kills the process with SIGINT when it exits,
  after opsctl had printed its line and chosen exit 130. Any later `exec()` of a string clears
  the flag, so `main` runs one on the way out: the exit status opsctl chose is the one the
  caller sees.
- On CPython 3.11 a KeyboardInterrupt raised inside a class's `__set_name__` (pydantic builds
  classes with dataclass fields while it is imported) reaches the caller as a RuntimeError
  caused by it ("Error calling __set_name__ ..."); `core.errors.is_ctrl_c` counts it as the
  Ctrl-C it is, here and in the CLI's failure mapping.
"""

from __future__ import annotations

import _thread
import ctypes
import signal
import sys
import threading
import time
from typing import Any

STARTING = "error: interrupted ({by}) while starting\n"
_REDELIVERY_S = 0.05
_previous_hook = sys.unraisablehook
# Re-raising is armed only while the CLI runs: once `main` is on its way out, a Ctrl-C that
# could not be raised goes to the previous hook (it must never land after opsctl chose its exit).
_lock = threading.Lock()
_state = {"armed": False}


def _ctrl_c_not_lost(unraisable: Any) -> None:
    """sys.unraisablehook: a Ctrl-C that landed where it could not be raised is raised again in
    the main thread, as the same type; anything else, and anything once the CLI is done or the
    interpreter is shutting down, goes to the previous hook."""
    exc = unraisable.exc_value
    # Only KeyboardInterrupt: other BaseExceptions reach this hook in normal runs (an
    # asyncio.CancelledError in a finalizer), and raising one again in the main thread broke
    # clean-ups (a fresh-clone CI run found it).
    if isinstance(exc, KeyboardInterrupt) and _state["armed"] and not sys.is_finalizing() \
            and threading.current_thread() is threading.main_thread():
        # _thread, not threading: Thread.start waits for the thread, which never answers at
        # interpreter shutdown.
        _thread.start_new_thread(_interrupt_soon, (type(exc),))
        return
    _previous_hook(unraisable)


def _interrupt_soon(kind: type[BaseException]) -> None:
    time.sleep(_REDELIVERY_S)  # the hook has returned by then
    main = threading.main_thread().ident
    with _lock:
        if _state["armed"] and main is not None:  # raised at the main thread's next bytecode
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main), ctypes.py_object(kind))


def _disarm() -> None:
    """No re-raise from here on, and none pending (a NULL exception clears it)."""
    with _lock:
        _state["armed"] = False
        main = threading.main_thread().ident
        if main is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main), None)
    sys.unraisablehook = _previous_hook


def _forget_unhandled_interrupt() -> None:
    exec("None")  # noqa: S102 - a constant; clears CPython's flag (see the module docstring)


def main() -> None:
    _state["armed"] = True
    sys.unraisablehook = _ctrl_c_not_lost
    try:
        _run()
    finally:
        _ignore_late_ctrl_c()
        _disarm()
        _forget_unhandled_interrupt()


def _ignore_late_ctrl_c() -> None:
    """opsctl chose its exit: a Ctrl-C (SIGTERM, SIGHUP) from here on would only turn it into a
    death by the signal (the gate Ctrl-C module saw one land after the error line was printed)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)


def _run() -> None:
    try:
        from opsctl.core.errors import handle_termination

        handle_termination()
        from opsctl.cli import main as cli_main
    except (KeyboardInterrupt, RuntimeError) as exc:
        from opsctl.core.errors import INTERRUPTIONS, interrupting_signal, is_ctrl_c

        if not is_ctrl_c(exc):  # a RuntimeError that is not a Ctrl-C is a bug: its traceback
            raise
        by, code = INTERRUPTIONS[interrupting_signal()]
        sys.stderr.write(STARTING.format(by=by))
        raise SystemExit(code) from None
    cli_main()
