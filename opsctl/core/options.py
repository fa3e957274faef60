"""Parsing option values that hold lists, the same way for every command."""

from __future__ import annotations

from opsctl.core.errors import UsageError


def comma_items(text: str, option: str, hint: str) -> tuple[str, ...]:
    """`a,b,c` as its stripped items (one trailing comma tolerated); an empty item before a
    value (`a,,b`, `,a`) is a UsageError (exit 2), not silently dropped: a typo that lost a
    value (issue 25: `--concurrency 1,,2` and `--variants a,,b` were accepted)."""
    items = tuple(part.strip() for part in text.split(","))
    if len(items) > 1 and not items[-1]:
        items = items[:-1]
    if any(not item for item in items):
        raise UsageError(f"{option} {text!r}: an empty item in the comma-separated list",
                         hint=hint)
    return items
