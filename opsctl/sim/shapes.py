"""The JSON of the OpenAI-compatible answers as sglang 0.5.23 writes them.

Read from its wheel's ``srt/entrypoints/openai/`` and checked against its own pydantic models
by ``tests/component/test_sim_protocol.py``:

- usage: ``UsageInfo.model_dump()`` with ``completion_tokens_details`` (protocol.py
  ``UsageInfo``).
- the chat message: 0.5.23's ``ChatMessage`` serializer drops ``tool_calls`` when it is None.
- chat stream chunks: 0.5.23 builds them with msgspec (``sse_utils.build_sse_content``:
  ``reasoning_content`` always, ``role``/``content`` only when set, no ``usage`` key); it
  writes the usage chunk with ``model_dump_json()``.
- message roles: ``ChatCompletionMessageUserParam`` takes ``user``, and
  ``ChatCompletionMessageGenericParam`` the roles below, case-insensitively (its
  ``_normalize_role``).
"""

from __future__ import annotations

from typing import Any

GENERIC_ROLES = ("system", "assistant", "tool", "function", "developer", "latest_reminder", "root")


def role_accepted(role: object) -> bool:
    """Whether the chat request model takes a message with this role."""
    return role == "user" or (isinstance(role, str) and role.lower() in GENERIC_ROLES)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """UsageInfo.model_dump() as UsageProcessor.calculate_token_usage fills it (no cache report)."""
    body: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }
    body["completion_tokens_details"] = None
    return body


def chat_message(content: str) -> dict[str, Any]:
    """The assistant message of a non-streaming chat completion (no reasoning parser run)."""
    return {"role": "assistant", "content": content, "reasoning_content": None}


def chat_chunk(head: dict[str, Any], delta: dict[str, Any],
               finish: str | None, matched: Any) -> dict[str, Any]:
    """One content/role/finish chunk; ``head`` holds id, object, created and model."""
    return {**head, "choices": [{"index": 0, "delta": {"reasoning_content": None, **delta},
                                 "logprobs": None, "finish_reason": finish,
                                 "matched_stop": matched}]}
