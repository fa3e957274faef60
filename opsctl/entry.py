"""The console script and `python -m opsctl`: the CLI, imported and run with opsctl's interrupt
handling armed (opsctl.core.interrupts: a Ctrl-C, SIGTERM or SIGHUP is a KeyboardInterrupt raised
only where Python can raise it, and its exit code is 128 + the signal's number).

Importing the CLI takes a moment (typer, rich, every command's declarations); a Ctrl-C in that
moment is one line and its exit code, not Python's KeyboardInterrupt traceback (issue 25, item
5). Nothing heavy is imported before the handlers are armed: `core.interrupts` is standard
library only. Before that (the interpreter starting) a signal ends the process as usual: nothing
of opsctl's has run.
"""

from __future__ import annotations

import sys

from opsctl.core import interrupts

STARTING = "error: interrupted ({by}) while starting\n"
INTERRUPTED = "error: interrupted ({by})\n"


def main() -> None:
    interrupts.arm()
    try:
        try:
            from opsctl.cli import main as cli_main
        except KeyboardInterrupt:
            _leave(STARTING)
        try:
            cli_main()
        except (KeyboardInterrupt, interrupts.SecondInterrupt):
            _leave(INTERRUPTED)  # one that landed while the CLI's top chose what to report
    finally:
        interrupts.disarm()


def _leave(line: str) -> None:
    interrupts.leaving()
    sys.stderr.write(line.format(by=interrupts.interrupted_by()))
    raise SystemExit(interrupts.exit_code()) from None
