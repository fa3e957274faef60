"""Deterministic text generation: what a request will produce, decided before it starts.

The tokens are a pure function of the prompt (and of a salt for sampling or the corrupt fault),
so a smoke test can compare outputs across runs and variants; the length is fixed up front so
usage counts always agree with what was streamed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

# A small fixed vocabulary: token id = index; one token is one word.
VOCAB: tuple[str, ...] = (
    "the", "model", "serves", "tokens", "on", "eight", "cards", "with", "a", "patched",
    "kernel", "that", "gathers", "rows", "before", "casting", "them", "so", "decode", "is",
    "faster", "and", "memory", "stays", "calm", "while", "requests", "stream", "back", "to",
    "every", "client", "in", "order", "as", "latency", "falls", "under", "load", "cache",
    "pages", "hold", "keys", "values", "for", "each", "layer", "of", "attention", "heads",
    "batch", "grows", "slowly", "but", "throughput", "rises", "until", "queue", "fills", "up",
    "then", "scheduler", "waits", "briefly",
)
# Ids of the simulator's own vocabulary; sglang reports the matched EOS id in matched_stop.
EOS_TOKEN_ID = len(VOCAB)
MIN_NATURAL_LENGTH = 32
NATURAL_LENGTH_SPAN = 992  # natural lengths are 32..1023 tokens, EOS included

_PROMPT_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
# Per-message framing of the simulator's "chat template" (role marker and separators).
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PER_REPLY = 2


def prompt_key(prompt: Any, salt: bytes = b"") -> bytes:
    """A digest of the prompt in canonical JSON form, plus an optional salt."""
    canonical = json.dumps(prompt, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(canonical.encode() + b"\x00" + salt, digest_size=16).digest()


def _hash_int(key: bytes, tag: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(key + tag, digest_size=8).digest(), "little")


def natural_length(key: bytes) -> int:
    """Tokens the prompt generates when nothing stops it earlier (the last one is EOS)."""
    return MIN_NATURAL_LENGTH + _hash_int(key, b"length") % NATURAL_LENGTH_SPAN


def token_id_at(key: bytes, position: int) -> int:
    return _hash_int(key, position.to_bytes(4, "little")) % len(VOCAB)


def token_text(token_id: int, position: int) -> str:
    if token_id == EOS_TOKEN_ID:
        return ""
    word = VOCAB[token_id]
    return word if position == 0 else " " + word


def count_text_tokens(text: str) -> int:
    return len(_PROMPT_TOKEN_RE.findall(text))


def message_text(content: Any) -> str:
    """OpenAI message content: a string or a list of parts; only text parts count here."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def count_chat_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    body = sum(count_text_tokens(message_text(m.get("content"))) for m in messages)
    return body + CHAT_TOKENS_PER_MESSAGE * len(messages) + CHAT_TOKENS_PER_REPLY


@dataclass(frozen=True)
class Plan:
    """The full output of one request: its tokens and how it finishes."""

    key: bytes
    total: int
    stops: bool

    @classmethod
    def make(cls, key: bytes, max_new_tokens: int | None, ignore_eos: bool) -> Plan:
        natural = natural_length(key)
        if max_new_tokens is None:
            return cls(key=key, total=natural, stops=True)
        if not ignore_eos and natural <= max_new_tokens:
            return cls(key=key, total=natural, stops=True)
        return cls(key=key, total=max_new_tokens, stops=False)

    def token(self, position: int) -> tuple[int, str]:
        """(token id, text) of the token at ``position``; the last token of a stop is EOS."""
        if self.stops and position == self.total - 1:
            return EOS_TOKEN_ID, ""
        token_id = token_id_at(self.key, position)
        return token_id, token_text(token_id, position)

    def finish_reason(self) -> dict[str, Any]:
        """sglang's finish_reason JSON (FINISH_MATCHED_TOKEN / FINISH_LENGTH .to_json())."""
        if self.stops:
            return {"type": "stop", "matched": EOS_TOKEN_ID}
        return {"type": "length", "length": self.total}

    def text(self) -> str:
        return "".join(self.token(i)[1] for i in range(self.total))
