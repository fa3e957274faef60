"""Text a server (or any peer) sent, made safe to print on one terminal line.

rich prints a `Text` literally (no markup), but it passes ESC sequences and newlines through: a
server's `"\x1b]0;title\x07"` or `"flashinfer\nok"` in a field `verify` shows would retitle the
terminal, recolour it or forge a table row. `printable` writes every character that is not
printable (C0/C1 controls, line and paragraph separators, bidi overrides and other format
characters) as its Python escape (`\x1b`, `\n`, `\u202e`), so what is shown is what was sent.
"""

from __future__ import annotations


def _escape(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")


def printable(text: str) -> str:
    """`text` with each non-printable character (a space stays) written as its escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else _escape(c) for c in text)
