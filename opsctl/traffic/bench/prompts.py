"""bench's prompts: generated locally and deterministically (no dataset download, no tokenizer)."""

from __future__ import annotations

import random

# A fixed vocabulary of common English words: most tokenizers map each (with its leading space)
# to one token, so `input_words` approximates the prompt length in tokens. The server-counted
# prompt tokens are reported alongside, so the approximation is visible, never hidden.
_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy process music market sense nation plan college interest "
    "death experience effect use class control care field development role effort rate heart "
    "drug show leader light voice wife police mind price report decision son view relationship "
    "town road arm difference value building action model season society tax director position"
)
_WORDS = tuple(_WORD_TEXT.split())


def make_prompt(index: int, words: int, seed: int = 0) -> str:
    """A deterministic prompt, unique per index so no request shares a cached prefix."""
    rng = random.Random(seed * 1_000_003 + index)
    body = " ".join(rng.choice(_WORDS) for _ in range(max(0, words - 2)))
    return f"Request {index}: {body}"


def random_words(count: int, rng: random.Random) -> list[str]:
    """`count` words of the fixed vocabulary drawn from `rng` (about one token each)."""
    return [rng.choice(_WORDS) for _ in range(count)]
