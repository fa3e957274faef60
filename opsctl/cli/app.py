"""The typer app, its consoles and shared options, and the one place errors become exit codes.

Exit codes: 0 ok · 1 unexpected bug · 2 bad usage or invalid profile · 3 build failed ·
4 launch/readiness failed · 5 smoke or SLO failed · 6 Docker daemon unreachable.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from opsctl.core.errors import OpsctlError

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 unexpected bug; 2 bad usage or invalid profile; 3 build failed; "
    "4 launch/readiness failed; 5 smoke or SLO failed; 6 Docker daemon unreachable; 130 interrupted."
)

app = typer.Typer(
    help="Deploy GLM-5-NVFP4 with sglang on one 8x RTX PRO 6000 host.\n\n" + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Piped output (CI logs, scripts) keeps whole table cells instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

ProfileOpt = Annotated[
    str | None,
    typer.Option("--profile", "-p", help="Profile name under deploy/ or a YAML path "
                 "(default: $OPSCTL_PROFILE or 'sim')."),
]
VariantOpt = Annotated[str | None, typer.Option("--variant", "-v", help="Variant of the profile.")]


def main() -> None:
    """Console entry point: every OpsctlError becomes one line, a hint and its exit code.

    typer runs in standalone mode, so its own usage errors already exit 2 with click's message.
    """
    try:
        app()
    except OpsctlError as exc:
        for line in exc.details:
            err_console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
        err_console.print(f"[bold red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
        if exc.hint:
            err_console.print(f"[dim]hint:[/] {exc.hint}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
