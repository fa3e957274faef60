"""Eval mode: answers that are right or wrong on purpose, so accuracy checks can be tested.

Two kinds of prompt get an answer instead of the usual hash-chosen words:

- a GSM8K few-shot prompt (``...Question: <q>\\nAnswer:`` at its end, the format of sglang
  0.5.23 ``test/few_shot_gsm8k.py:32-36``) whose last question is in the answer key: the key's
  own answer text (its reasoning and ``#### <n>``), or on a chosen share of the questions the same
  text with a different final number;
- a pass-key probe (the needle ``The pass key is <digits>. Remember it.`` somewhere in the prompt,
  and ``What is the pass key?`` after it, as ``opsctl.traffic.evals.probes`` builds it): the digits
  read from the prompt, or other digits when the needle starts beyond the configured number of
  prompt tokens, as an attention path that breaks at long context would answer.

The answer streams one whitespace-led piece per token and then EOS (finish ``stop``); a smaller
``max_tokens`` cuts it (finish ``length``), as for any other prompt. Anything else falls through
to the normal generator. Stop strings are not applied: the answers contain none.

Environment (read on each request; like the other ``OPSCTL_SIM_*`` knobs they come from the
container's environment; a bad value answers HTTP 500 naming the variable):

================================  =======  ======================================================
``OPSCTL_SIM_EVAL_KEY``           unset    GSM8K-shaped JSONL (``{"question", "answer"}``) used as
                                           the answer key; unset: GSM8K prompts are not recognised
``OPSCTL_SIM_EVAL_WRONG_SHARE``   0        share of the key's questions answered wrong: exactly
                                           floor(n x share) of n, chosen by the seed
``OPSCTL_SIM_EVAL_SEED``          0        which questions are the wrong ones
``OPSCTL_SIM_NEEDLE_MAX_TOKENS``  unset    a needle starting more than N prompt tokens into the
                                           prompt is missed (tokens counted as for ``usage``)
``OPSCTL_SIM_EVAL_REASONING``     none     chat answers with a thinking trace, as sglang streams it
                                           with --reasoning-parser (``reasoning_content`` first):
                                           ``decoy`` a wrong final number in the thinking and the
                                           key's answer in ``content``; ``swap`` the key's answer
                                           in the thinking and a wrong number in ``content``;
                                           ``trace`` the key's answer in the thinking and a
                                           sentence without a number in ``content``
================================  =======  ======================================================
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opsctl.sim.generate import EOS_TOKEN_ID, Plan, count_text_tokens, message_text, prompt_key

KEY_ENV = "OPSCTL_SIM_EVAL_KEY"
WRONG_SHARE_ENV = "OPSCTL_SIM_EVAL_WRONG_SHARE"
SEED_ENV = "OPSCTL_SIM_EVAL_SEED"
REASONING_ENV = "OPSCTL_SIM_EVAL_REASONING"
NEEDLE_MAX_TOKENS_ENV = "OPSCTL_SIM_NEEDLE_MAX_TOKENS"
REASONING_MODES = ("none", "decoy", "swap", "trace")

# The probe's wording (opsctl/traffic/evals/probes.py builds it; the two must agree).
NEEDLE_RE = re.compile(r"The pass key is (\d+)\. Remember it\.")
NEEDLE_QUESTION = "What is the pass key?"
_FINAL_NUMBER_RE = re.compile(r"####\s*(\d[\d,]*)")
_PIECE_RE = re.compile(r"\s*\S+")
MAX_KEY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class AnswerPlan(Plan):
    """A Plan whose tokens are fixed text pieces (one per token) instead of hashed words."""

    pieces: tuple[str, ...] = ()
    thinking: int = 0  # the first `thinking` pieces are the thinking trace (`reasoning_content`)

    @classmethod
    def of_text(cls, prompt: Any, text: str, max_new_tokens: int | None,
                thinking: str = "") -> AnswerPlan:
        thought = tuple(_PIECE_RE.findall(thinking))
        pieces = thought + tuple(_PIECE_RE.findall(text))
        natural = len(pieces) + 1  # EOS closes the answer
        total = natural if max_new_tokens is None else min(natural, max_new_tokens)
        return cls(key=prompt_key(prompt, b"eval"), total=total, stops=total == natural,
                   pieces=pieces, thinking=len(thought))

    def is_thinking(self, position: int) -> bool:
        return position < self.thinking

    def token(self, position: int) -> tuple[int, str]:
        if self.stops and position == self.total - 1:
            return EOS_TOKEN_ID, ""
        piece = self.pieces[position]
        # Any stable id outside the simulator's word vocabulary will do.
        return EOS_TOKEN_ID + 1 + zlib.crc32(piece.encode()) % 100_000, piece


@dataclass(frozen=True)
class EvalKey:
    """The answer key: question -> answer text, with the wrong ones already rewritten."""

    answers: Mapping[str, str]


@dataclass(frozen=True)
class EvalSettings:
    key: EvalKey | None
    needle_max_tokens: int | None
    reasoning: str = "none"  # one of REASONING_MODES (OPSCTL_SIM_EVAL_REASONING)


def eval_plan(prompt: Any, max_new_tokens: int | None,
              environ: Mapping[str, str] = os.environ) -> Plan | None:
    """The eval answer to ``prompt``, or None when it is not an eval prompt (the hook's entry)."""
    text = _prompt_text(prompt)
    if text is None:
        return None
    settings = settings_from_env(environ)
    answer = needle_answer(text, settings.needle_max_tokens)
    if answer is None and settings.key is not None:
        question = last_question(text)
        known = settings.key.answers.get(question) if question is not None else None
        answer = None if known is None else " " + known  # continues "Answer:" as a model would
        if answer is not None and isinstance(prompt, list) and settings.reasoning != "none":
            thinking, answer = _reasoned(settings.reasoning, answer, " " + _wrong(known or ""))
            return AnswerPlan.of_text(prompt, answer, max_new_tokens, thinking=thinking)
    return None if answer is None else AnswerPlan.of_text(prompt, answer, max_new_tokens)


def _reasoned(mode: str, right: str, wrong: str) -> tuple[str, str]:
    """(thinking, content) of a reasoning mode's answer."""
    if mode == "decoy":
        return wrong, right
    if mode == "swap":
        return right, wrong
    return right, " The answer is the last line of my reasoning."  # trace


def _prompt_text(prompt: Any) -> str | None:
    """A completion prompt's text, or the last chat message's; None for token ids."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return message_text(prompt[-1].get("content"))
    return None


def last_question(text: str) -> str | None:
    """``<q>`` of a prompt ending in ``Question: <q>\\nAnswer:``, stripped; else None."""
    _, found, tail = text.rpartition("Question: ")
    question, marker, rest = tail.rpartition("\nAnswer:")
    if not found or not marker or rest.strip():
        return None
    return question.strip()


def needle_answer(text: str, max_tokens: int | None) -> str | None:
    """The pass key as the answer, other digits when the needle is too deep, None if no probe."""
    asked = text.rfind(NEEDLE_QUESTION)
    match = NEEDLE_RE.search(text, 0, asked) if asked >= 0 else None
    if match is None:
        return None
    digits = match.group(1)
    if max_tokens is not None and count_text_tokens(text[:match.start()]) > max_tokens:
        digits = _other_number(digits)
    return f" {digits}."


def _other_number(digits: str) -> str:
    """Different digits of the same length, chosen from the original (deterministic)."""
    span = 9 * 10 ** (len(digits) - 1)
    low = 10 ** (len(digits) - 1)
    seed = int.from_bytes(hashlib.blake2b(digits.encode(), digest_size=8).digest(), "little")
    other = low + seed % span
    if str(other) == digits:
        other = low + (other - low + 1) % span
    return str(other)


def settings_from_env(environ: Mapping[str, str]) -> EvalSettings:
    path = environ.get(KEY_ENV, "").strip()
    share = _number(environ, WRONG_SHARE_ENV, "0")
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"{WRONG_SHARE_ENV} must be in [0, 1], got {share}")
    seed = int(_number(environ, SEED_ENV, "0"))
    needle = environ.get(NEEDLE_MAX_TOKENS_ENV, "").strip()
    needle_max = int(_number(environ, NEEDLE_MAX_TOKENS_ENV, "0")) if needle else None
    key = None
    if path:
        try:
            stat = os.stat(path)
        except OSError as exc:
            raise ValueError(f"{KEY_ENV}={path!r}: {exc.strerror}") from None
        key = load_key(path, stat.st_mtime_ns, stat.st_size, share, seed)
    reasoning = environ.get(REASONING_ENV, "").strip() or "none"
    if reasoning not in REASONING_MODES:
        raise ValueError(f"{REASONING_ENV} must be one of {', '.join(REASONING_MODES)}, got "
                         f"{reasoning!r}")
    return EvalSettings(key=key, needle_max_tokens=needle_max, reasoning=reasoning)


def _number(environ: Mapping[str, str], name: str, default: str) -> float:
    raw = environ.get(name, "").strip() or default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None


@functools.lru_cache(maxsize=4)
def load_key(path: str, mtime_ns: int, size: int, wrong_share: float, seed: int) -> EvalKey:
    """Read the key once per file version; mtime and size are in the cache key, not used."""
    if size > MAX_KEY_BYTES:
        raise ValueError(f"{KEY_ENV}={path!r}: larger than {MAX_KEY_BYTES} bytes")
    answers: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip() or line.startswith("#"):
                continue
            try:
                record = json.loads(line)
                question, answer = str(record["question"]).strip(), str(record["answer"])
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{KEY_ENV}={path!r} line {number}: not a "
                                 '{"question", "answer"} object') from None
            answers[question] = answer
    ranked = sorted(answers, key=lambda q: hashlib.blake2b(
        f"{seed}|{q}".encode(), digest_size=8).digest())
    for question in ranked[:int(len(answers) * wrong_share)]:
        answers[question] = _wrong(answers[question])
    return EvalKey(answers=answers)


def _wrong(answer: str) -> str:
    """The same reasoning text with a final ``#### <n>`` one larger (or appended if absent)."""
    finals = list(_FINAL_NUMBER_RE.finditer(answer))
    if not finals:
        return answer + "\n#### 1"
    last = finals[-1]
    value = int(last.group(1).replace(",", "")) + 1
    return answer[:last.start()] + f"#### {value}" + answer[last.end():]
