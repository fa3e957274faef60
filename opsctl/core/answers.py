"""An OpenAI-compatible server's JSON answer, read strictly: a body (`decode_json`) and the
model list reduced to its ids (`model_ids`). What is not the shape the OpenAI API defines (not
UTF-8, not JSON, no `data` list of cards with string ids) raises `Malformed` with a one-line
reason. Here, below the rooms, because readiness (deploy) and the clients (traffic) read both.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_SNIPPET = 80  # characters of a bad answer quoted in a reason


class Malformed(ValueError):
    """The answer is not what the OpenAI API defines; the message is one line."""


def snippet(raw: bytes | str) -> str:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return repr(text[:_SNIPPET])


def decode_json(raw: bytes) -> Any:
    """Strict UTF-8, then JSON; Malformed says which failed and where.

    orjson (C, UTF-8 only, no NaN) reads every well-formed chunk; what it refuses goes the
    standard library's way, which names the fault (and still accepts what JSON's grammar
    extensions allow, as before)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Malformed(f"not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        return json.loads(text)
    except ValueError:
        raise Malformed(f"not JSON: {snippet(text)}") from None
    except RecursionError:
        raise Malformed("JSON nested too deeply") from None


def model_ids(payload: Any) -> list[str]:
    """The ids of an OpenAI model list (`{"data": [{"id": ...}, ...]}`); Malformed otherwise."""
    cards = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(cards, list):
        raise Malformed(f"no `data` list in {snippet(json.dumps(payload))}")
    ids = [card.get("id") if isinstance(card, dict) else None for card in cards]
    if not all(isinstance(name, str) and name for name in ids):
        raise Malformed("a model card has no string `id`")
    return [str(name) for name in ids]
