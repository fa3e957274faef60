"""`opsctl ARGS` run in this process (opsctl.cli.main, stdout and stderr captured): the exit
code and output a user would see, a hundred times faster than a subprocess. A bug (an exception
main() lets through) is exit 1 with its traceback in `err`, as the console script would show it."""

from __future__ import annotations

import contextlib
import io
import sys
import time
import traceback
from dataclasses import dataclass

from opsctl.core.errors import EXIT_BUG


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    seconds: float


def run_cli(*args: str) -> Outcome:
    from opsctl.cli import main

    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    argv = sys.argv
    sys.argv = ["opsctl", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_BUG)
    except BaseException:  # noqa: BLE001 - a bug: the caller sees exit 1 and the traceback
        code = EXIT_BUG
        err.write(traceback.format_exc())
    finally:
        sys.argv = argv
    return Outcome(code, out.getvalue(), err.getvalue(), time.monotonic() - started)
