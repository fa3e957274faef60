"""How a Ctrl-C (or SIGTERM, SIGHUP: taken as one) reaches opsctl: a KeyboardInterrupt, raised
only where Python can raise it, and the signal remembered for the exit code and the one line.

`arm` (opsctl.entry, first) installs the handlers: SIGINT's is `on_sigint`, SIGTERM's and
SIGHUP's `interrupt`, which remembers the signal and then does what a Ctrl-C does at that moment
(it calls SIGINT's handler of the moment: this module's, `asyncio.run`'s through `run_async`, or
`deploy.ownership.InterruptGuard`'s). A signal ignored when opsctl started (`nohup`, a background
job) stays ignored. The first interrupting signal is remembered: the exit code is 128 + its
number (130, 143, 129) and the one line names it (`interrupted_by`).

A KeyboardInterrupt raised by a signal handler goes wrong where code is being built rather
than run:

- inside code run by `exec()`/`eval()` of a string (dataclasses, namedtuple and typer's
  annotations are built so): CPython marks the interrupt unhandled and, when the process exits,
  kills it with SIGINT, overriding the exit status opsctl chose;
- inside a class's `__set_name__` (pydantic and dataclasses build classes so): CPython 3.11 hands
  the caller a RuntimeError caused by it, a traceback instead of a Ctrl-C;
- inside Python code that pydantic-core's validator builder calls while a model class is built:
  it hands the caller a SchemaError caused by it (the integration Ctrl-C module, seed 43, while
  the CLI imported `decide/settings.py`), and other builders may wrap it their own way;
- inside a finalizer (`__del__`, a weakref callback): printed as "Exception ignored in ..." and
  lost; the command runs on.

The first three are avoided: opsctl's handlers look at the frames the signal interrupted
(`deferred`), and inside code compiled from a string, a `__set_name__` or a module being
imported (where classes are built) raise nothing and send the signal again 50 ms later, until
that code is done: at most 10 s, then they raise anyway. A signal sent again is sent again
until one of opsctl's handlers ran for it (`_send`: CPython can miss one). The fourth cannot be
told from the frames (any function can be a weakref callback), so it is repaired: while armed,
the unraisable hook sends the interrupting signal again, marked as a re-delivery
(`redelivered`) so that InterruptGuard does not count it as a second Ctrl-C. `disarm`
(opsctl.entry, on the way out) ignores the three signals from then on, sends nothing more and
gives the previous hook back: nothing lands after opsctl chose its exit.

Standard library only, and no class built while it is imported (a Ctrl-C then would be the
first case): it is imported before the CLI.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

# Each interrupting signal: how the one line names it, and its exit code (128 + its number, as
# a shell reports a command the signal stopped).
INTERRUPTIONS: dict[int, tuple[str, int]] = {
    signum: (name, 128 + signum)
    for signum, name in ((signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM"),
                         (signal.SIGHUP, "SIGHUP"))
}
TERMINATING = (signal.SIGTERM, signal.SIGHUP)
RESEND_S = 0.05  # a deferred or lost interrupt is sent again this much later
MAX_DEFER_S = 10.0  # then it is raised wherever it lands (an import under load takes seconds)
# Frames where a KeyboardInterrupt must not be raised (see the module docstring): code compiled
# from a string, a class's __set_name__, and importlib running a module's code.
_FROM_A_STRING = "<string>"
_WRAPPED_BY_CPYTHON = "__set_name__"
_IMPORTING = "<frozen importlib._bootstrap"

_received: list[int] = []  # the first interrupting signal this process received, if any
_terminal: list[int] = []  # stdout, stderr: those that were a terminal when opsctl started
_lock = _thread.allocate_lock()
# armed: re-sending allowed; main: the main thread's id; base: the frame that armed (what runs
# below it is not opsctl's: a console script, runpy, `python -c`, a test runner); deferring
# since, deferred at: when the interrupt being deferred first came and was last deferred (None:
# none is); redelivery: the next interrupt is a lost one sent again (the unraisable hook's);
# hook: the one `arm` replaced; held: `held` sections open; leaving: the exit is chosen.
# handled: how many times one of opsctl's handlers ran (a re-sent signal none ran for is sent
# again, `_send`).
_state: dict[str, Any] = {"armed": False, "main": None, "base": None, "deferring_since": None,
                          "deferred_at": None, "redelivery": False, "hook": sys.unraisablehook,
                          "held": 0, "leaving": False, "handled": 0}
# A deferral chain whose last re-sent signal went to another handler (asyncio's) ends unseen:
# one deferred longer ago than this starts a new chain.
_CHAIN_GAP_S = 1.0


class SecondInterrupt(BaseException):
    """A Ctrl-C while a run cleans up after itself (deploy.ownership.InterruptGuard): leave what
    is left, and say what it is."""


# --- what interrupted this run -----------------------------------------------------------------

def note_interruption(signum: int) -> None:
    """Remember `signum` when it is the first interrupting signal of this process (and count
    the handler's run: the first thing each of opsctl's handlers does)."""
    _state["handled"] += 1
    if not _received and signum in INTERRUPTIONS:
        _received.append(signum)


def interrupting_signal() -> int:
    """The signal that interrupted this run: the first one remembered, else SIGINT (a
    KeyboardInterrupt from Python's own handler is a Ctrl-C)."""
    return _received[0] if _received else signal.SIGINT


def interrupted_by() -> str:
    """How the one line names what interrupted this run: Ctrl-C, SIGTERM or SIGHUP."""
    return INTERRUPTIONS[interrupting_signal()][0]


def exit_code() -> int:
    """128 + the interrupting signal's number."""
    return INTERRUPTIONS[interrupting_signal()][1]


# --- the handlers ------------------------------------------------------------------------------

def on_sigint(signum: int, frame: FrameType | None) -> None:
    """SIGINT's handler while opsctl runs: Python's own (KeyboardInterrupt), raised only where
    Python can raise it; nothing once the exit is chosen."""
    _state["handled"] += 1
    if _state["leaving"] or deferred(frame):
        return
    redelivered()  # a lost one sent again is the same Ctrl-C: nothing to tell apart here
    raise KeyboardInterrupt


def interrupt(signum: int, frame: FrameType | None) -> None:
    """The handler of SIGTERM and SIGHUP: remember the signal, then do what a Ctrl-C does now,
    by calling SIGINT's handler of the moment (with this signal's number). With none from Python
    (SIGINT was ignored when opsctl started: a background job), KeyboardInterrupt where it can
    be raised. Nothing once the exit is chosen."""
    note_interruption(signum)
    if signum == signal.SIGHUP:
        _leave_the_terminal()
    if _state["leaving"]:
        return
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):  # given this signal's number: InterruptGuard tells them apart
        handler(signum, frame)
        return
    if not deferred(frame):
        raise KeyboardInterrupt


def deferred(frame: FrameType | None) -> bool:
    """True when the signal handler that got `frame` must raise nothing now: it interrupted code
    compiled from a string, a `__set_name__`, an import or a section `held`. The interrupting
    signal is then sent again in RESEND_S; once it has been deferred MAX_DEFER_S, False (raise it
    wherever it lands). Unarmed (nothing would send it again), False."""
    now, since, last = time.monotonic(), _state["deferring_since"], _state["deferred_at"]
    if since is not None and now - last > _CHAIN_GAP_S:
        since = None
    if not _state["armed"] or (since is not None and now - since >= MAX_DEFER_S) \
            or not (_state["held"] or _in_fragile_code(frame)):
        _state["deferring_since"] = None
        return False
    _state["deferring_since"], _state["deferred_at"] = (now if since is None else since), now
    _send_soon(interrupting_signal())
    return True


def redelivered() -> bool:
    """True once for an interrupt the unraisable hook sent again: the handler that lost it
    already ran for it (InterruptGuard must not count it a second time)."""
    again, _state["redelivery"] = _state["redelivery"], False
    return bool(again)


def _in_fragile_code(frame: FrameType | None) -> bool:
    """Any frame from `frame` down to the one that armed is compiled from a string, a
    `__set_name__` or importlib's; False where that frame is not below (`arm` ran elsewhere: a
    test's fixture)."""
    fragile = False
    while frame is not None:
        if frame is _state["base"]:
            return fragile
        code = frame.f_code
        fragile = fragile or code.co_filename == _FROM_A_STRING \
            or code.co_name == _WRAPPED_BY_CPYTHON or code.co_filename.startswith(_IMPORTING)
        frame = frame.f_back
    return False


def _ctrl_c_not_lost(unraisable: Any) -> None:
    """sys.unraisablehook while armed: a Ctrl-C that landed where it could not be raised (a
    finalizer) is sent again, marked as the one already counted (a SecondInterrupt, the second
    Ctrl-C of a clean-up, is sent again unmarked: it counts as a second again); anything else,
    and anything at interpreter shutdown, goes to the previous hook. Only those two: other
    BaseExceptions reach this hook in normal runs (an asyncio.CancelledError in a finalizer)."""
    lost = unraisable.exc_value
    if isinstance(lost, KeyboardInterrupt | SecondInterrupt) and _state["armed"] \
            and not sys.is_finalizing() and _thread.get_ident() == _state["main"]:
        _state["redelivery"] = isinstance(lost, KeyboardInterrupt)
        _send_soon(interrupting_signal())
        return
    _state["hook"](unraisable)


def _send_soon(signum: int) -> None:
    # _thread, not threading: Thread.start waits for the thread, which never answers at
    # interpreter shutdown.
    _thread.start_new_thread(_send, (signum,))


def _send(signum: int) -> None:
    """Send `signum` to the main thread (a sleep or a wait there wakes for it) RESEND_S from
    now, once the handler or the hook has returned; and again every RESEND_S while none of
    opsctl's handlers ran for it and one of them is the signal's handler, at most MAX_DEFER_S.
    CPython runs no handler for a signal that lands after the main thread released the GIL for
    a blocking call and before the call blocks: the call then goes on to its end (a `sleep(30)`
    in a finalizer did, 4 runs in 720 under load: this thread takes the GIL exactly when
    the main thread lets it go for such a call)."""
    seen: int | None = None  # the handlers' count when this thread last sent it
    sent_to: object = None  # the signal's handler then
    for _ in range(round(MAX_DEFER_S / RESEND_S)):
        time.sleep(RESEND_S)
        with _lock:
            handler = signal.getsignal(signum)
            # Another handler (asyncio's) counts nothing, and a second one it gets is a second
            # Ctrl-C to it; once it took one, the handler put back after it (run_async's) must
            # not get it again either: sent once, unless it went to an unchanged one of opsctl's.
            if not _state["armed"] or (seen is not None and (
                    _state["handled"] != seen or handler != sent_to or not _opsctls(sent_to))):
                return
            seen, sent_to = _state["handled"], handler
            signal.pthread_kill(_state["main"], signum)


def _opsctls(handler: object) -> bool:
    """The handler is one of opsctl's (this module's, InterruptGuard's): it counts its runs."""
    return str(getattr(handler, "__module__", "")).startswith("opsctl.")


# --- arming --------------------------------------------------------------------------------------

def arm() -> None:
    """Install the handlers and the unraisable hook (from the main thread, before anything else
    of opsctl's). A signal ignored when opsctl started stays ignored."""
    _state["main"], _state["base"] = _thread.get_ident(), sys._getframe(1)
    _state["leaving"] = False
    _terminal[:] = [fd for fd in (1, 2) if os.isatty(fd)]  # a hung-up one answers no more
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, on_sigint)
    for signum in TERMINATING:
        if signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, interrupt)
    with _lock:
        _state["armed"] = True
    if sys.unraisablehook is not _ctrl_c_not_lost:
        _state["hook"], sys.unraisablehook = sys.unraisablehook, _ctrl_c_not_lost


def leaving() -> None:
    """opsctl chose its exit (it is printing its last line): opsctl's handlers raise nothing
    from here on, so a Ctrl-C now cannot cut the line short or turn the exit into a traceback."""
    _state["leaving"] = True


def disarm() -> None:
    """opsctl chose its exit: the three signals are ignored from here on (one now would only
    turn that exit into a death by the signal), nothing is sent again, the hook goes back."""
    leaving()  # first: changing a handler runs the pending ones
    if _thread.get_ident() == _state["main"]:
        for signum in INTERRUPTIONS:
            signal.signal(signum, signal.SIG_IGN)
    with _lock:
        _state["armed"] = False
    sys.unraisablehook = _state["hook"]


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` with asyncio's own Ctrl-C handling: its first Ctrl-C cancels the main
    task, so the run's clean-ups and partial reports happen at an await. asyncio installs it only
    over Python's default handler, so `on_sigint` steps aside while the loop runs; under another
    handler (InterruptGuard's) asyncio leaves that one in place, as always. Closing the loop is
    `held`: an interrupt inside `loop.close()` left it half closed, and its finalizer printed a
    traceback at exit (the integration Ctrl-C module, seed 7, `decide` stopped by SIGTERM)."""
    import asyncio

    ours = _thread.get_ident() == _state["main"] and signal.getsignal(signal.SIGINT) is on_sigint
    runner = asyncio.Runner()
    if ours:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return runner.run(main)
    finally:
        if ours:  # first: Python's own handler would not wait for `held`
            signal.signal(signal.SIGINT, on_sigint)
        with held():
            runner.close()


@contextmanager
def held() -> Iterator[None]:
    """A critical section: an interrupt that arrives inside raises nothing there and is sent
    again every RESEND_S until the section ends (at most MAX_DEFER_S), as in code `deferred`
    knows from its frames. Under opsctl's handlers only (Python's own does not wait)."""
    _state["held"] += 1
    try:
        yield
    finally:
        _state["held"] -= 1


def _leave_the_terminal() -> None:
    """The terminal hung up: every write to it fails (EIO), and a clean-up note that failed so
    would cut the clean-up short. What opsctl still prints there goes to /dev/null instead
    (output to files or pipes is kept)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in _terminal:
            os.dup2(devnull, fd)
    finally:
        os.close(devnull)
