"""Where two runs' greedy outputs first differ: the request, the token (or character), the text.

Used by ``--compare-with``: greedy decoding of the same prompts on two variants of one model
should give the same outputs; when it does not, the first request that differs and the first
token where it differs say how early a kernel change bites. Token ids are compared when both
sides recorded them; otherwise the offset is in characters, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

EXCERPT_CHARS = 30


@dataclass(frozen=True)
class GreedyOutput:
    """One request's greedy output as a run recorded it (``text`` None: the request failed)."""

    request_id: str
    text: str | None
    tokens: Sequence[int] | None = None


class Divergence(BaseModel):
    """The first difference; ``unit`` "missing" means one side has no output (see ``note``)."""

    request_index: int  # position in the reference's order
    request_id: str
    unit: Literal["tokens", "characters", "missing"]
    offset: int
    reference_excerpt: str = ""
    current_excerpt: str = ""
    note: str = ""

    def describe(self) -> str:
        where = f"request {self.request_index} ({self.request_id})"
        if self.unit == "missing":
            return f"{where}: {self.note}"
        return (f"{where}: first difference at {self.offset} {self.unit}: "
                f"{self.reference_excerpt!r} vs {self.current_excerpt!r}")


def locate_divergence(reference: Sequence[GreedyOutput], current: Sequence[GreedyOutput],
                      excerpt_chars: int = EXCERPT_CHARS) -> Divergence | None:
    """The first request of ``reference`` whose output ``current`` does not reproduce.

    Requests only in ``current`` are not divergences of the reference's outputs and are ignored
    here (the caller reports them); a request that failed on both sides is skipped.
    """
    by_id = {output.request_id: output for output in current}
    for index, ref in enumerate(reference):
        cur = by_id.get(ref.request_id)
        note = _missing_note(ref, cur)
        if note:
            return Divergence(request_index=index, request_id=ref.request_id, unit="missing",
                              offset=0, note=note)
        if cur is None or ref.text is None or cur.text is None:
            continue  # both failed: nothing to compare
        found = _locate(ref, cur)
        if found is None:
            continue
        unit, offset = found
        at = _first_difference(ref.text, cur.text)
        at = min(len(ref.text), len(cur.text)) if at is None else at
        return Divergence(request_index=index, request_id=ref.request_id, unit=unit,
                          offset=offset, reference_excerpt=_excerpt(ref.text, at, excerpt_chars),
                          current_excerpt=_excerpt(cur.text, at, excerpt_chars))
    return None


def _missing_note(ref: GreedyOutput, cur: GreedyOutput | None) -> str:
    if cur is None:
        return "not in the current run"
    if ref.text is None and cur.text is not None:
        return "no output in the reference"
    if cur.text is None and ref.text is not None:
        return "no output in the current run"
    return ""


def _locate(
    ref: GreedyOutput, cur: GreedyOutput
) -> tuple[Literal["tokens", "characters"], int] | None:
    """First differing token when both sides have token ids, else first differing character."""
    if ref.tokens is not None and cur.tokens is not None:
        token = _first_difference(ref.tokens, cur.tokens)
        return None if token is None else ("tokens", token)
    char = _first_difference(ref.text or "", cur.text or "")
    return None if char is None else ("characters", char)


def _first_difference(a: Sequence[object], b: Sequence[object]) -> int | None:
    """Index of the first unequal element; the shorter length if one is a prefix of the other."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def _excerpt(text: str, at: int, width: int) -> str:
    """About ``width`` characters centred on ``at``, with "..." where the text was cut."""
    start = max(0, at - width // 2)
    end = at + width // 2
    return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")
