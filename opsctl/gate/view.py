"""What `up --gate` prints: each step as it happens, then the outcome (a failure's one line and
hint are the error the CLI prints after it)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.text import Text

from opsctl.gate.gate import GateResult


def gate_step(console: Console) -> Callable[[str], None]:
    """Prints each step of `up --gate` as it happens."""
    return lambda line: console.print(Text.assemble(("gate:", "bold"), " ", line),
                                      highlight=False, soft_wrap=True)


def print_gate(console: Console, result: GateResult) -> None:
    """The outcome; a failure's one line and hint are the error the CLI prints after this."""
    if result.push_error:
        console.print(Text.assemble(("warning:", "bold yellow"), f" {result.push_error}"),
                      highlight=False, soft_wrap=True)
    if result.outcome == "passed":
        console.print(Text.assemble(("gate passed", "bold green"),
                                    f" {result.profile}/{result.variant}; smoke report "
                                    f"{result.report}"), highlight=False, soft_wrap=True)
