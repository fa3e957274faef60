"""What bench asks: the prompt and output length of request number i, from a fixed seed.

- `words` (the default): prompts over a fixed word list, about one token per word, unique per
  request (opsctl.traffic.prompts); no tokenizer, nothing shared between prompts.
- `random`: token-exact prompts of `input_len` tokens, random token ids decoded with the served
  model's own tokenizer (a local tokenizer.json read with the `tokenizers` library, never a hub
  download), re-encoded and trimmed until the count is exact. Without a tokenizer it falls back
  to `words` and says so in `note`.
- `sharegpt`: a ShareGPT-format JSON file (a list of `{"conversations": [{"from", "value"}]}`):
  the first human turn is the prompt and the following gpt turn's length is the output length
  (in tokens with a tokenizer, else in words, noted); shuffled with the seed.
- `generated-shared-prefix`: `groups` x `prompts_per_group` prompts; the prompts of a group share
  a prefix of `prefix_len` tokens (words without a tokenizer) and differ in a question of
  `input_len`, so the prefix cache is exercised as a variant would exercise it.

A workload that has fewer prompts than asked repeats from its start.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from opsctl.core.errors import UsageError
from opsctl.core.files import read_bounded
from opsctl.traffic.prompts import make_prompt

DatasetName = Literal["words", "random", "sharegpt", "generated-shared-prefix"]
DATASET_NAMES: tuple[DatasetName, ...] = ("words", "random", "sharegpt", "generated-shared-prefix")
MAX_DATASET_BYTES = 1 << 30  # ShareGPT's cleaned split is about 650 MB
MAX_WORKLOAD_WORDS = 20_000_000  # sglang's default shared-prefix set is about 2.2 million
_EXACT_TRIES = 8  # re-encode rounds before the nearest count is accepted


@dataclass(frozen=True, slots=True)
class WorkItem:
    prompt: str
    output_tokens: int
    input_tokens: int | None = None  # counted by the local tokenizer; None without one


class Tokens(Protocol):
    """The part of a `tokenizers.Tokenizer` opsctl uses."""

    def encode(self, sequence: Any, pair: Any = ..., is_pretokenized: bool = ...,
               add_special_tokens: bool = ...) -> Any: ...
    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...
    def get_vocab_size(self, with_added_tokens: bool = ...) -> int: ...


@dataclass(frozen=True)
class WorkloadSpec:
    name: DatasetName = "words"
    input_len: int = 256
    output_len: int = 256
    seed: int = 0
    tokenizer: Path | None = None
    dataset_path: Path | None = None
    groups: int = 8
    prompts_per_group: int = 8
    prefix_len: int = 512


class Workload:
    """The built workload: `item(i)` for any i >= 0, and what a reader should know about it."""

    def __init__(self, name: str, items: list[WorkItem] | None, spec: WorkloadSpec,
                 note: str | None = None) -> None:
        self.name, self.items, self.spec, self.note = name, items, spec, note

    def item(self, index: int) -> WorkItem:
        if self.items is None:
            return WorkItem(make_prompt(index, self.spec.input_len, self.spec.seed),
                            self.spec.output_len)
        return self.items[index % len(self.items)]


def parse_dataset_name(value: str) -> DatasetName:
    for name in DATASET_NAMES:
        if value == name:
            return name
    raise UsageError(f"--dataset-name {value!r}: choose one of {', '.join(DATASET_NAMES)}",
                     hint="e.g. --dataset-name words (the default)")


def load_tokenizer(path: Path) -> Tokens:
    """A tokenizer.json (or a model directory holding one), read locally."""
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"--tokenizer {path}: no tokenizer.json there",
                         hint="give the host path of the model directory or its tokenizer.json")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UsageError("--tokenizer needs the `tokenizers` package",
                         hint="pip install 'opsctl[bench]'") from None
    try:
        loaded: Tokens = Tokenizer.from_file(str(file))
    except Exception as exc:  # the library raises its own exception type for a bad file
        raise UsageError(f"--tokenizer {file}: not a tokenizer: {exc}",
                         hint="pass the served model's tokenizer.json or its folder") from None
    return loaded


def build(spec: WorkloadSpec) -> Workload:
    tokens = load_tokenizer(spec.tokenizer) if spec.tokenizer else None
    if spec.name == "sharegpt":
        return _sharegpt(spec, tokens)
    if spec.name == "generated-shared-prefix":
        return _shared_prefix(spec, tokens)
    if spec.name == "random" and tokens is not None:
        rng = random.Random(spec.seed)
        count = max(64, spec.groups * spec.prompts_per_group)
        items = [_exact(tokens, spec.input_len, rng, spec.output_len) for _ in range(count)]
        return Workload("random", items, spec)
    note = ("no --tokenizer: word prompts, about one token per word" if spec.name == "random"
            else None)
    return Workload("words", None, spec, note)


def _random_ids(tokens: Tokens, count: int, rng: random.Random) -> list[int]:
    size = tokens.get_vocab_size(with_added_tokens=False)
    return [rng.randrange(size) for _ in range(count)]


def _exact(tokens: Tokens, length: int, rng: random.Random, output: int,
           prefix: str = "") -> WorkItem:
    """A text of exactly `length` tokens after `prefix` when re-encoded (the nearest count the
    tokenizer allows after a few rounds otherwise; `input_tokens` says which)."""
    ids = _random_ids(tokens, length, rng)
    text = tokens.decode(ids, skip_special_tokens=True)
    for _ in range(_EXACT_TRIES):
        ids = tokens.encode(text, add_special_tokens=False).ids
        if len(ids) == length:
            break
        ids = ids[:length] + _random_ids(tokens, max(0, length - len(ids)), rng)
        text = tokens.decode(ids, skip_special_tokens=True)
    counted = len(tokens.encode(prefix + text, add_special_tokens=False).ids)
    return WorkItem(prefix + text, output, counted)


def _sharegpt(spec: WorkloadSpec, tokens: Tokens | None) -> Workload:
    if spec.dataset_path is None:
        raise UsageError("--dataset-name sharegpt needs --dataset-path FILE",
                         hint="a local ShareGPT-format JSON file")
    try:
        data = json.loads(read_bounded(spec.dataset_path, "--dataset-path", MAX_DATASET_BYTES))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--dataset-path {spec.dataset_path}: {exc}",
                         hint="a local ShareGPT-format JSON file") from None
    items: list[WorkItem] = []
    for entry in data if isinstance(data, list) else []:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        pair = _first_exchange(turns if isinstance(turns, list) else [])
        if pair is None:
            continue
        prompt, answer = pair
        if tokens is None:
            items.append(WorkItem(prompt, max(1, len(answer.split()))))
        else:
            out = len(tokens.encode(answer, add_special_tokens=False).ids)
            items.append(WorkItem(prompt, max(1, out),
                                  len(tokens.encode(prompt, add_special_tokens=False).ids)))
    if not items:
        raise UsageError(f"--dataset-path {spec.dataset_path}: no human turn followed by a gpt "
                         "turn (ShareGPT format: [{\"conversations\": [{\"from\", \"value\"}]}])",
                         hint="each conversation needs a 'human' turn and then a 'gpt' turn")
    random.Random(spec.seed).shuffle(items)
    note = None if tokens else "no --tokenizer: output lengths are the reference answers' words"
    return Workload("sharegpt", items, spec, note)


def _first_exchange(turns: list[Any]) -> tuple[str, str] | None:
    for first, second in zip(turns, turns[1:], strict=False):
        if (isinstance(first, dict) and isinstance(second, dict)
                and first.get("from") in ("human", "user") and second.get("from") in ("gpt", "assistant")
                and isinstance(first.get("value"), str) and isinstance(second.get("value"), str)
                and first["value"].strip()):
            return first["value"], second["value"]
    return None


def _shared_prefix(spec: WorkloadSpec, tokens: Tokens | None) -> Workload:
    words = spec.groups * spec.prompts_per_group * (spec.prefix_len + spec.input_len)
    if words > MAX_WORKLOAD_WORDS:  # every prompt is held in memory (10^10 was a MemoryError)
        raise UsageError(f"--gsp-groups x --gsp-prompts-per-group x (--gsp-prefix-len + "
                         f"--input-words) is {words:,} words, more than {MAX_WORKLOAD_WORDS:,}",
                         hint="fewer groups or prompts per group: each prompt is built up front")
    rng = random.Random(spec.seed)
    items: list[WorkItem] = []
    for group in range(spec.groups):
        if tokens is None:
            prefix = make_prompt(10_000_000 + group, spec.prefix_len, spec.seed) + "\n"
            items += [WorkItem(prefix + make_prompt(group * spec.prompts_per_group + i,
                                                    spec.input_len, spec.seed), spec.output_len)
                      for i in range(spec.prompts_per_group)]
            continue
        prefix = _exact(tokens, spec.prefix_len, rng, spec.output_len).prompt + "\n"
        items += [_exact(tokens, spec.input_len, rng, spec.output_len, prefix)
                  for _ in range(spec.prompts_per_group)]
    note = None if tokens else "no --tokenizer: prefix and questions in words, about one token each"
    return Workload("generated-shared-prefix", items, spec, note)
