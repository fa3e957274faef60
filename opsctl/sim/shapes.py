"""The JSON of the OpenAI-compatible answers where the pinned releases differ.

Read from each wheel's ``srt/entrypoints/openai/`` and checked against its own pydantic models
by ``tests/component/test_sim_protocol.py``:

- usage: ``UsageInfo.model_dump()``; 0.5.23 added ``completion_tokens_details`` (protocol.py
  ``UsageInfo``), 0.5.9 has no such field.
- the chat message: 0.5.9 dumps ``ChatMessage`` whole (``tool_calls: null`` included); 0.5.23's
  ``ChatMessage`` serializer drops ``tool_calls`` when it is None.
- chat stream chunks: 0.5.9 writes ``ChatCompletionStreamResponse.model_dump_json()`` (every
  delta field, ``usage: null``); 0.5.23 builds them with msgspec (``sse_utils.build_sse_content``:
  ``reasoning_content`` always, ``role``/``content`` only when set, no ``usage`` key).
  Both releases write the usage chunk with ``model_dump_json()``.
- message roles: ``ChatCompletionMessageUserParam`` takes ``user``, and
  ``ChatCompletionMessageGenericParam`` the roles below, case-insensitively (its
  ``_normalize_role``); 0.5.23 added ``latest_reminder`` and ``root``.
"""

from __future__ import annotations

from typing import Any

OLD_SHAPES = frozenset({"0.5.9"})  # releases with the 0.5.9 shapes above
_GENERIC_ROLES = ("system", "assistant", "tool", "function", "developer")
GENERIC_ROLES = {"0.5.9": _GENERIC_ROLES, "0.5.23": (*_GENERIC_ROLES, "latest_reminder", "root")}


def role_accepted(release: str, role: object) -> bool:
    """Whether the release's chat request model takes a message with this role."""
    return role == "user" or (isinstance(role, str) and role.lower() in GENERIC_ROLES[release])


def usage(release: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """UsageInfo.model_dump() as UsageProcessor.calculate_token_usage fills it (no cache report)."""
    body: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }
    if release not in OLD_SHAPES:
        body["completion_tokens_details"] = None
    return body


def chat_message(release: str, content: str) -> dict[str, Any]:
    """The assistant message of a non-streaming chat completion (no reasoning parser run)."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": None}
    if release in OLD_SHAPES:
        message["tool_calls"] = None
    return message


def chat_chunk(release: str, head: dict[str, Any], delta: dict[str, Any],
               finish: str | None, matched: Any) -> dict[str, Any]:
    """One content/role/finish chunk; ``head`` holds id, object, created and model."""
    if release in OLD_SHAPES:
        full = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
        return {**head, "choices": [{"index": 0, "delta": {**full, **delta}, "logprobs": None,
                                     "finish_reason": finish, "matched_stop": matched}],
                "usage": None}
    return {**head, "choices": [{"index": 0, "delta": {"reasoning_content": None, **delta},
                                 "logprobs": None, "finish_reason": finish,
                                 "matched_stop": matched}]}
