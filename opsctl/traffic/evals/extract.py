"""The answer GSM8K scoring reads from a text: sglang's rule, reimplemented.

sglang 0.5.23 ``test/few_shot_gsm8k.py:46-54`` (``get_answer_value``): drop every comma, find
all runs of ASCII-or-Unicode digits (``re.findall(r"\\d+")``), take the last, and convert it with
``ast.literal_eval``; no digits, or a run that is not a Python integer literal (a leading zero:
``"05"``), gives INVALID. The same rule makes the labels from the reference answers
(``few_shot_gsm8k.py:85``), so a sign or a decimal point is ignored on both sides alike:
``-3`` reads as 3 and ``2.5`` as 5. An invalid prediction never equals a label: it counts as a
wrong answer and is reported separately (``few_shot_gsm8k.py:128-129``).
"""

from __future__ import annotations

import re

_DIGITS_RE = re.compile(r"\d+")


def extract_answer(text: str) -> int | None:
    """The last integer of ``text`` as sglang reads it; None where sglang returns INVALID."""
    runs = _DIGITS_RE.findall(text.replace(",", ""))
    if not runs:
        return None
    last = runs[-1]
    if not last.isascii():
        # literal_eval of non-ASCII digits (e.g. Arabic-Indic) is a SyntaxError: INVALID.
        return None
    if len(last) > 1 and last[0] == "0" and last.strip("0"):
        return None  # "05": a leading zero is a SyntaxError for literal_eval; "00" is 0
    return int(last)
