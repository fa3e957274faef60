"""What opsctl reads from an OpenAI-compatible answer, checked before it is believed.

A completion (or one SSE chunk of a stream) is reduced to a `Piece`: the generated text, the
finish reason, the usage counts and any in-band error. Anything that does not have the shape
the OpenAI API defines (not UTF-8, not JSON, `choices` that is not a list of objects, a text
that is not a string, a usage count that is negative, fractional or not a number) raises
`Malformed` with a one-line reason, so a request fails with that reason instead of a traceback
(opsctl.core.answers reads the JSON and the model list the same way).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from opsctl.core.answers import Malformed, decode_json

Api = Literal["completions", "chat"]

@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int | None
    completion_tokens: int | None


@dataclass(frozen=True, slots=True)
class Piece:
    text: str  # the answer: completion text, or a chat message's `content`
    finish_reason: str | None
    usage: Usage | None
    has_choice: bool  # the chunk carried a choice (a usage-only chunk does not)
    error: str | None = None  # an in-band error object's message
    # A reasoning model's thinking (`reasoning_content`, split off by sglang's --reasoning-parser):
    # generated tokens (they count for TTFT and ITL), never the answer that is scored.
    thinking: str = ""


def error_message(payload: Any) -> str:
    """The `message` of an OpenAI error object (`{"error": {"message": ...}}`), else the payload."""
    if isinstance(payload, dict):
        inner = payload.get("error", payload)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
        if isinstance(inner, str):
            return inner[:300]
    return str(payload)[:300]


def body_message(raw: bytes) -> str:
    """One line from an error answer: its JSON error message, or the start of its text."""
    try:
        return error_message(decode_json(raw))
    except Malformed:
        return " ".join(raw[:200].decode("utf-8", errors="replace").split()) or "(empty body)"


def parse_piece(api: Api, payload: Any, *, stream: bool) -> Piece:
    """One chunk (`stream=True`) or one whole completion, checked field by field."""
    if not isinstance(payload, dict):
        raise Malformed(f"expected a JSON object, got {_kind(payload)}")
    if payload.get("error") is not None:
        return Piece("", None, None, has_choice=False, error=error_message(payload))
    choices = payload.get("choices")
    if choices is None and stream:
        choices = []  # a usage-only chunk
    if not isinstance(choices, list):
        raise Malformed(f"choices is {_kind(choices)}, expected a list")
    if not choices and not stream:
        raise Malformed("choices is empty")
    texts: list[str] = []
    thoughts: list[str] = []
    finish: str | None = None
    for index, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise Malformed(f"choices[{index}] is {_kind(choice)}, expected an object")
        thinking, text = _choice_text(api, choice, index, stream)
        texts.append(text)
        thoughts.append(thinking)
        reason = _optional_str(choice.get("finish_reason"), f"choices[{index}].finish_reason")
        finish = reason or finish
    return Piece("".join(texts), finish, _usage(payload.get("usage")), has_choice=bool(choices),
                 thinking="".join(thoughts))


def _choice_text(api: Api, choice: dict[str, Any], index: int, stream: bool) -> tuple[str, str]:
    """(thinking, answer) of one choice."""
    where = f"choices[{index}]"
    if api == "completions":
        return "", _optional_str(choice.get("text"), f"{where}.text") or ""
    key = "delta" if stream else "message"
    message = choice.get(key)
    if message is None:
        return "", ""
    if not isinstance(message, dict):
        raise Malformed(f"{where}.{key} is {_kind(message)}, expected an object")
    # A reasoning model streams its thinking first; those are generated tokens too.
    thinking = _optional_str(message.get("reasoning_content"), f"{where}.{key}.reasoning_content")
    content = _optional_str(message.get("content"), f"{where}.{key}.content")
    return thinking or "", content or ""


def _usage(value: Any) -> Usage | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Malformed(f"usage is {_kind(value)}, expected an object")
    return Usage(prompt_tokens=_count(value, "prompt_tokens"),
                 completion_tokens=_count(value, "completion_tokens"))


def _count(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Malformed(f"usage.{key}={json.dumps(value)[:40]} is not a non-negative integer")
    return value


def _optional_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise Malformed(f"{where} is {_kind(value)}, expected a string")


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
