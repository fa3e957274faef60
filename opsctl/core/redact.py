"""Secrets in what opsctl writes or prints: the API key's one source, masking and redaction.

The API key comes from `$OPSCTL_API_KEY` only. Two things must never reach a report, a table, a
warning or an error line: the key itself (a server may echo it back in a model id, generated
text or an error) and the userinfo of a URL (`http://user:password@host`). `redact` removes
both from a string; `redact_tree` from every string of a JSON-shaped value, which is how the
report writers scrub a whole report at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel

Model = TypeVar("Model", bound=BaseModel)

API_KEY_ENV = "OPSCTL_API_KEY"
MASK = "****"
# A secret shorter than this is not searched for in text: it would match ordinary words.
MIN_SECRET_CHARS = 4

# `scheme://user:password@` (or `scheme://token@`): everything between `//` and `@` of an
# authority, which holds no `/`, whitespace or quote.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"<>]+@")


def api_key_from_env() -> str | None:
    value = os.environ.get(API_KEY_ENV, "").strip()
    return value or None


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The OpenAI-style bearer header sglang, vLLM and others check, or none without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def mask_secret(secret: str | None) -> str | None:
    """`****` + the last 4 characters; a short secret shows nothing of itself."""
    if not secret:
        return None
    return MASK + (secret[-4:] if len(secret) >= 12 else "")


def redact_userinfo(text: str) -> str:
    """`http://user:pw@host/x` -> `http://****@host/x`, wherever a URL sits in the text."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)


def redact(text: str, *secrets: str | None) -> str:
    """The text without URL userinfo and without any of the secrets (each masked)."""
    text = redact_userinfo(text)
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_CHARS and secret in text:
            text = text.replace(secret, mask_secret(secret) or MASK)
    return text


def redact_tree(value: Any, secrets: Iterable[str | None]) -> Any:
    """A copy of a JSON-shaped value (dicts, lists, strings, numbers) with every string redacted."""
    wanted = tuple(secrets)
    if isinstance(value, str):
        return redact(value, *wanted)
    if isinstance(value, dict):
        return {redact(k, *wanted) if isinstance(k, str) else k: redact_tree(v, wanted)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(item, wanted) for item in value]
    return value


def redact_model(model: Model, secrets: Iterable[str | None]) -> Model:
    """The same report with every string redacted: what writers and views are given."""
    return type(model).model_validate(redact_tree(model.model_dump(mode="json"), secrets))
