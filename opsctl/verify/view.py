"""What `opsctl verify` shows: one table row per checked field, then a one-line summary.

Values come from the server and from profiles; they are printed as plain text (rich `Text`,
never parsed as markup), so a value like ``[red]`` shows as written, and with every control
character escaped (core.text.printable): a server's ESC sequence or newline shows as `\x1b`,
`\n`, never reaches the terminal raw.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opsctl.core.text import printable
from opsctl.verify.app import VerifyResult

_STATUS_STYLE = {"ok": "green", "mismatch": "bold red", "unknown": "yellow"}


def _cell(value: Any) -> Text:
    return Text("-" if value is None else printable(str(value)))


def show_verify(result: VerifyResult, console: Console) -> None:
    table = Table(
        title=Text(
            printable(
                f"verify {result.base_url}: profile {result.profile}, "
                f"variant {result.variant}, sglang {result.sglang_version}"
            )
        )
    )
    for column in ("field", "expected", "resolved", "status", "expected from / why unknown",
                   "reported at"):
        table.add_column(column, overflow="fold")
    for check in result.checks:
        table.add_row(
            _cell(check.field), _cell(check.expected), _cell(check.resolved),
            Text(check.status, style=_STATUS_STYLE[check.status]),
            _cell(check.reason or check.source), _cell(check.where),
        )
    console.print(table)
    counts = {status: sum(1 for c in result.checks if c.status == status)
              for status in ("ok", "mismatch", "unknown")}
    summary = Text(f"{counts['ok']} ok, {counts['mismatch']} mismatch, {counts['unknown']} "
                   "unknown (unknown is not a pass: its reason says what would settle it)")
    console.print(summary, soft_wrap=True)
