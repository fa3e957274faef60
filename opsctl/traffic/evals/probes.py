"""Long-context probes: greedy pass-key retrieval and a shared-prefix consistency pair.

GLM-5's DSA indexer lets each query attend to its top ``index_topk`` (2048) context tokens;
dense flashinfer MLA attends to all of them, so the two computations agree up to 2048 tokens and
may differ beyond (shared/reference/glm5-attention-paths.md). The probes therefore run at about
4K, 16K and 64K tokens, where a broken long-context path shows up as a wrong pass key while short
prompts still read fluently.

- Needle: filler sentences with ``The pass key is <5 digits>. Remember it. <digits> is the pass
  key.`` inserted at a chosen depth (0 = start, 1 = end), then ``What is the pass key? The pass
  key is``; it passes when the first integer of the greedy answer is the key. (The sglang
  simulator's eval mode, opsctl/sim/evalmode.py, recognises this exact wording.)
- Prefix pair: one long needle prompt sent twice, the second after the first has finished, so the
  second is served from the radix (prefix) cache and reads the cached KV through the paged-prefill
  path (which the gather-then-cast patch also changes); greedy answers must be identical. 16K
  tokens by default: beyond index_topk, and past the 8192 cached tokens from which
  glm5-attention-paths.md reports sglang's MHA-with-cached-prefix path crashing when only one DSA
  backend is trtllm.

Token counts are approximate when no tokenizer is given: one token per word and one per
punctuation mark. The filler is built from short common English words, which BPE vocabularies of
100K+ entries usually hold as single tokens with their leading space; the rule of thumb (a token
is about 3/4 of a word) would overcount this text by about a fifth. A tokenizer's count function
can be passed instead, and the server's own ``usage.prompt_tokens`` is recorded beside the
estimate whenever the server reports it.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from opsctl.config.evalconfig import DEFAULT_PREFIX_PAIR_TOKENS, DEFAULT_SIZES
from opsctl.core.errors import UsageError
from opsctl.traffic.client import Api, RequestResult, TrafficClient, generate, request_body

DEFAULT_MAX_TOKENS = 24

INTRO = ("A pass key is hidden somewhere in the long text below. Read all of it, remember the "
         "pass key, and give it when you are asked at the end.\n\n")
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "\n\nWhat is the pass key? The pass key is"
FILLER = (
    "The river runs slowly past the old mill.",
    "A gray cat sleeps on the warm stone wall.",
    "Clouds gather over the hills in the afternoon.",
    "The baker opens his shop before sunrise.",
    "Children walk to school along the quiet road.",
    "The library keeps its windows open in summer.",
    "A small boat drifts near the wooden pier.",
    "Leaves turn yellow when the nights grow cold.",
    "The market square fills with voices at noon.",
    "An old clock ticks in the empty hallway.",
    "Rain taps softly on the roof of the barn.",
    "The farmer counts his sheep at the end of the day.",
)
_INTEGER_RE = re.compile(r"\d+")
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

TokenCounter = Callable[[str], int]


def approx_tokens(text: str) -> int:
    """Token estimate without a tokenizer: words plus punctuation marks."""
    return len(_TOKEN_RE.findall(text))


@dataclass(frozen=True)
class NeedlePrompt:
    text: str
    key: str
    tokens: int  # by the counter used (approx_tokens unless a tokenizer was given)
    needle_at_tokens: int  # tokens before the needle


def needle_prompt(target_tokens: int, depth: float, seed: int,
                  count_tokens: TokenCounter = approx_tokens) -> NeedlePrompt:
    """A prompt of about ``target_tokens`` tokens with a random 5-digit key at ``depth``."""
    if target_tokens < 64 or not 0.0 <= depth <= 1.0:
        raise UsageError(f"needle probe: need at least 64 tokens and a depth in [0, 1], got "
                         f"{target_tokens} tokens at depth {depth}",
                         hint="eval.long_context.sizes: each at least 64 tokens")
    rng = random.Random(seed)
    key = str(rng.randrange(10_000, 100_000))
    needle = NEEDLE.format(key=key)
    budget = target_tokens - count_tokens(INTRO + needle + QUESTION)
    # Add as many sentences as surely fit, count, repeat: a few counts of the whole text, not
    # one per sentence, and an overshoot of at most one sentence.
    longest = max(count_tokens(sentence) for sentence in FILLER)
    sentences: list[str] = []
    while (missing := budget - count_tokens(" ".join(sentences))) > 0:
        sentences += [rng.choice(FILLER) for _ in range(max(1, missing // longest))]
    at = round(depth * len(sentences))
    before, after = " ".join(sentences[:at]), " ".join(sentences[at:])
    text = INTRO + " ".join(part for part in (before, needle, after) if part) + QUESTION
    return NeedlePrompt(text=text, key=key, tokens=count_tokens(text),
                        needle_at_tokens=count_tokens(INTRO + before))


def first_integer(text: str) -> str | None:
    match = _INTEGER_RE.search(text)
    return match.group(0) if match else None


class ProbeResult(BaseModel):
    name: str
    kind: Literal["needle", "prefix_pair"]
    passed: bool
    expected: str | None
    got: str | None
    target_tokens: int
    prompt_tokens_approx: int
    prompt_tokens: int | None = None  # the server's usage count, when it reports one
    depth: float
    duration_s: float
    detail: str
    error: str | None = None


def size_name(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


@dataclass(frozen=True)
class ProbeAsk:
    """How every probe asks (the model, the API, the answer's length, a request's time) and
    counts a prompt's tokens; each default written here once. A dataclass: it holds the
    counter, a function."""

    model: str
    api: Api = "completions"
    max_tokens: int = DEFAULT_MAX_TOKENS
    timeout_s: float = 300.0
    count_tokens: TokenCounter = approx_tokens


async def _ask(client: TrafficClient, ask: ProbeAsk, prompt: str) -> RequestResult:
    body = request_body(ask.api, ask.model, prompt, max_tokens=ask.max_tokens, stream=False,
                        temperature=0.0)
    return await generate(client, ask.api, body, timeout_s=ask.timeout_s)


def _failure(result: RequestResult) -> str | None:
    return None if result.ok else f"{result.error_kind}: {result.error}"


async def needle_probe(client: TrafficClient, ask: ProbeAsk, *, target_tokens: int,
                       depth: float = 0.5, seed: int = 0) -> ProbeResult:
    """Ask for the pass key once; pass when the answer's first integer is the key."""
    prompt = needle_prompt(target_tokens, depth, seed, ask.count_tokens)
    start = time.monotonic()
    result = await _ask(client, ask, prompt.text)
    got = first_integer(result.text) if result.ok else None
    passed = got == prompt.key
    detail = (f"pass key {prompt.key} at about token {prompt.needle_at_tokens} of "
              f"{prompt.tokens}: answered {result.text.strip()[:40]!r}")
    return ProbeResult(
        name=f"needle-{size_name(target_tokens)}", kind="needle", passed=passed,
        expected=prompt.key, got=got, target_tokens=target_tokens,
        prompt_tokens_approx=prompt.tokens, prompt_tokens=result.prompt_tokens, depth=depth,
        duration_s=round(time.monotonic() - start, 3), detail=detail, error=_failure(result))


async def prefix_pair_probe(client: TrafficClient, ask: ProbeAsk, *,
                            target_tokens: int = DEFAULT_PREFIX_PAIR_TOKENS, depth: float = 0.5,
                            seed: int = 1) -> ProbeResult:
    """The same long prompt twice in a row; the second answer must equal the first."""
    prompt = needle_prompt(target_tokens, depth, seed, ask.count_tokens)
    start = time.monotonic()
    first = await _ask(client, ask, prompt.text)
    second = await _ask(client, ask, prompt.text)
    error = _failure(first) or _failure(second)
    same = first.text == second.text
    found = "found" if first_integer(first.text) == prompt.key else "missed"
    detail = (f"second request (prefix-cached) answered {'the same' if same else 'differently'}"
              f"; the first {found} pass key {prompt.key}")
    return ProbeResult(
        name=f"prefix-pair-{size_name(target_tokens)}", kind="prefix_pair",
        passed=error is None and same, expected=first.text if first.ok else None,
        got=second.text if second.ok else None, target_tokens=target_tokens,
        prompt_tokens_approx=prompt.tokens, prompt_tokens=second.prompt_tokens, depth=depth,
        duration_s=round(time.monotonic() - start, 3), detail=detail, error=error)


async def run_long_context_probes(
    client: TrafficClient,
    ask: ProbeAsk,
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    depth: float = 0.5,
    prefix_pair_tokens: int | None = DEFAULT_PREFIX_PAIR_TOKENS,
    seed: int = 0,
    on_progress: Callable[[int, int, str], None] | None = None,  # (done, probes, the next)
) -> list[ProbeResult]:
    """One needle probe per size, then the prefix pair; one at a time (long prefills)."""
    results = []
    total = len(sizes) + (1 if prefix_pair_tokens else 0)
    for offset, size in enumerate(sizes):
        if on_progress is not None:
            on_progress(offset, total, f"needle {size_name(size)}")
        results.append(await needle_probe(client, ask, target_tokens=size, depth=depth,
                                          seed=seed + offset))
    if prefix_pair_tokens and on_progress is not None:
        on_progress(len(sizes), total, "prefix pair")
    if prefix_pair_tokens:
        results.append(await prefix_pair_probe(client, ask, target_tokens=prefix_pair_tokens,
                                               depth=depth, seed=seed + len(sizes)))
    return results
