"""The typer app, its consoles and shared options, and the one place errors become exit codes.

The exit codes themselves are opsctl.core.errors.EXIT_CODES; `--help` lists them from there.
Which foreign exceptions (OS, decoding, YAML, HTTP, Docker) map to which code is
opsctl.core.failures. Both consoles print text literally: rich markup and emoji codes are off,
because what opsctl prints quotes profiles, servers and the Docker engine (`[/x]` in a variant
name or "only [a-zA-Z0-9] are allowed" in an engine error must show as written). Styling is
given as rich `Text` styles, never as markup in a string.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from opsctl.core import interrupts
from opsctl.core.errors import EXIT_INTERRUPTED, OpsctlError, exit_codes_help
from opsctl.core.failures import as_opsctl_error, interrupted
from opsctl.core.interrupts import SecondInterrupt
from opsctl.core.redact import RedactingStream, api_key_from_env, redact
from opsctl.core.text import printable

EXIT_CODES_HELP = exit_codes_help()



# `-h` is `--help` everywhere (click passes the setting down to every sub-command's context).
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}


def command_group(help: str, *, completion: bool = False) -> typer.Typer:  # noqa: A002
    """A typer app or sub-command group with opsctl's one help style: click's plain formatting
    (paragraphs wrapped, no rich markup interpreted in help text: it is printed literally, as
    everything opsctl prints), `-h` as `--help`, no rich tracebacks; typer's own
    shell-completion options (--install-completion, --show-completion) on the root only."""
    return typer.Typer(help=help, no_args_is_help=True, add_completion=completion,
                       pretty_exceptions_enable=False, rich_markup_mode=None,
                       context_settings=HELP_OPTIONS)


app = command_group("Deploy GLM-5-NVFP4 with sglang on one 8x RTX PRO 6000 host.\n\n"
                    + EXIT_CODES_HELP, completion=True)


def _print_version(value: bool) -> None:
    if value:
        from opsctl import __version__

        console.print(f"opsctl {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", help="Print opsctl's version and exit.", is_eager=True,
        callback=_print_version)] = False,
) -> None:
    """Deploy GLM-5-NVFP4 with sglang on one 8x RTX PRO 6000 host."""

# Piped output (CI logs, scripts) keeps whole table cells instead of rich's 80-column default.
# Both print through core.redact: no secret reaches the terminal, whatever a view forgot.
console = Console(file=RedactingStream(lambda: sys.stdout),  # type: ignore[arg-type]
                  width=None if sys.stdout.isatty() else 200, markup=False, emoji=False)
err_console = Console(file=RedactingStream(lambda: sys.stderr),  # type: ignore[arg-type]
                      width=None if sys.stderr.isatty() else 200, markup=False, emoji=False)


def non_empty(value: str | None) -> str | None:
    """A typer callback for a text option: given, it holds something. An empty value (or only
    spaces) is refused while the command line is parsed (exit 2), never read as "not given",
    which would mean the default (`--name ''` rendered under the default name)."""
    if value is not None and not value.strip():
        raise typer.BadParameter("empty: leave the option out for its default")
    return value


ProfileOpt = Annotated[
    str | None,
    typer.Option("--profile", "-p", help="Profile name under deploy/ or a YAML path "
                 "(default: $OPSCTL_PROFILE or 'sim').", callback=non_empty),
]
VariantOpt = Annotated[str | None, typer.Option("--variant", "-v", help="Variant of the profile.",
                                                callback=non_empty)]

Number = TypeVar("Number", int, float)


def image_ref(value: str | None) -> str | None:
    """A typer callback for `--image`: a reference `docker run` can take, checked while the
    command line is parsed (exit 2), never a plan or a launch with an image no engine names."""
    from opsctl.image.registry import image_ref_problem

    problem = None if value is None else image_ref_problem(value)
    if value is not None and problem:
        raise typer.BadParameter(f"{value[:80]!r}: {problem}")
    return value


def image_reference(value: str | None) -> str | None:
    """A typer callback for an image another engine pulls (`render k8s --router-image`): not
    empty, and by Docker's reference grammar (core/imageref), so no space, newline or
    upper-case repository is written into a manifest."""
    from opsctl.core.imageref import reference_problem

    problem = None if non_empty(value) is None else reference_problem(str(value))
    if value is not None and problem:
        raise typer.BadParameter(f"{value[:80]!r}: {problem}")
    return value


def within(low: float, high: float) -> Callable[[Number | None], Number | None]:
    """A typer callback: the option's value must be a finite number in [low, high].

    Runs while the command line is parsed, so a bad value exits 2 before anything is touched;
    unlike typer's min/max it also refuses nan and inf.
    """

    def check(value: Number | None) -> Number | None:
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            raise typer.BadParameter(f"{value} is not between {low:g} and {high:g}")
        return value

    return check


def main() -> None:
    """Console entry point: every failure a user, a server or the daemon can cause becomes one
    line, a hint and its documented exit code (opsctl.core.failures); only a bug keeps its
    traceback and exits 1.

    typer runs in standalone mode, so its own usage errors already exit 2 with click's message.
    A Ctrl-C (SIGTERM, SIGHUP) anywhere inside typer, a command or the parsing of its options,
    typer turns into a silent exit 130 whatever the signal was: it is reported here as every
    interruption is, with its line and its own exit code.
    """
    try:
        app()
    except SystemExit as leaving:
        if not _typer_took_a_ctrl_c(leaving):
            raise
        _report(interrupted())
    except Exception as caught:  # noqa: BLE001 - mapped by family; a bug is re-raised
        exc = as_opsctl_error(caught)
        if exc is None:
            raise
        _report(exc)
    except (KeyboardInterrupt, SecondInterrupt):  # the second: one that escaped a clean-up
        _report(interrupted())


def _typer_took_a_ctrl_c(leaving: SystemExit) -> bool:
    """typer's `sys.exit(130)` for the KeyboardInterrupt its Exit(130) was raised from."""
    typer_exit = leaving.__context__
    return leaving.code == EXIT_INTERRUPTED and typer_exit is not None \
        and isinstance(typer_exit.__cause__, KeyboardInterrupt)


def _report(exc: OpsctlError) -> None:
    interrupts.leaving()  # the exit is chosen: a Ctrl-C now must not cut the lines short
    # Messages may quote a server that echoed the key, or a URL with credentials, and what a
    # server sent: each line is printed with its control characters escaped (core.text), so an
    # error stays one line and no ESC sequence reaches the terminal.
    key = api_key_from_env()
    for line in exc.details:
        err_console.print(f"  {printable(redact(line, key))}", highlight=False, soft_wrap=True)
    err_console.print(
        Text.assemble(("error:", "bold red"), " ", printable(redact(exc.message, key))),
        highlight=False,
        soft_wrap=True,
    )
    if exc.hint:
        err_console.print(Text.assemble(("hint:", "dim"), " ", printable(redact(exc.hint, key))),
                          highlight=False, soft_wrap=True)
    sys.exit(exc.exit_code)
