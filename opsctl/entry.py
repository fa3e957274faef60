"""The console script and `python -m opsctl`: the CLI, imported under a Ctrl-C guard.

Importing the CLI takes a moment (typer, rich, every room's declarations); a Ctrl-C in that
moment was Python's own KeyboardInterrupt traceback and a death by SIGINT instead of one line
and exit 130 (issue 25, item 5). Nothing heavy is imported here.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from opsctl.cli import main as cli_main
    except KeyboardInterrupt:
        from opsctl.core.errors import EXIT_INTERRUPTED

        sys.stderr.write("error: interrupted (Ctrl-C) while starting\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
    cli_main()
