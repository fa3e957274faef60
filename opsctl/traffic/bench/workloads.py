"""What bench asks: the prompt and output length of request number i, from a fixed seed.

- `words`: prompts over a fixed word list, about one token per word, unique per
  request (opsctl.traffic.bench.prompts); no tokenizer, nothing shared between prompts.
- `random` (the default when `--dataset-name` is not given): token-exact prompts of `input_len`
  tokens, random token ids decoded with the served model's own tokenizer (a local
  tokenizer.json read with the `tokenizers` library, never a hub download), re-encoded and
  trimmed until the count is exact, so ISL/OSL figures compare with published 1k/1k and 8k/1k
  runs. Without a tokenizer it falls back to `words` and says so in `note` (as the default,
  also when the tokenizer or the `tokenizers` package is not there: never an error).
- `sharegpt`: a ShareGPT-format JSON file (a list of `{"conversations": [{"from", "value"}]}`):
  the first human turn is the prompt and the following gpt turn's length is the output length
  (in tokens with a tokenizer, else in words, noted); shuffled with the seed.
- `generated-shared-prefix`: `groups` x `prompts_per_group` prompts; the prompts of a group share
  a prefix of `prefix_len` tokens (words without a tokenizer) and differ in a question of
  `input_len`, so the prefix cache is exercised as a variant would exercise it.

A workload that has fewer prompts than asked repeats from its start.

Multi-turn (`turns` > 1, any of the above): request i is turn t of session s (`session_turn`);
its prompt is the workload's item i, sent after the session's history of earlier prompts and the
server's own answers to them (levels.RequestSpec keeps it), so each turn's prompt grows and the
server's prefix cache sees what a chat session gives it.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from opsctl.core.errors import UsageError
from opsctl.core.files import read_bounded
from opsctl.traffic.bench.prompts import make_prompt, random_words
from opsctl.traffic.settings import BENCH_DEFAULTS as _B
from opsctl.traffic.settings import DATASET_NAMES, BenchSettings, DatasetName

TRACE_BLOCK_TOKENS = 512  # what one of a Mooncake trace's hash_ids stands for
MAX_TRACE_REQUESTS = 1_000_000
MAX_DATASET_BYTES = 1 << 30  # ShareGPT's cleaned split is about 650 MB
MAX_TOKENIZER_BYTES = 128 << 20  # a large vocabulary's tokenizer.json is a few 10 MB
MAX_LENGTH_PAIRS = 64  # ISL:OSL shapes in one sweep (BenchSettings.length_pairs' bound)
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
    """The workload knobs of BenchSettings (their defaults and meaning are written there; `of`
    is the one mapping) and what the run resolved: a tokenizer found for the default, each
    phase's session width."""

    name: DatasetName = "words"
    input_len: int = _B.input_words
    output_len: int = _B.output_tokens
    seed: int = _B.seed
    tokenizer: Path | None = None
    dataset_path: Path | None = None
    groups: int = _B.gsp_groups
    prompts_per_group: int = _B.gsp_prompts_per_group
    prefix_len: int = _B.gsp_prefix_len
    # --dataset-name not given: `random`, token-exact when a tokenizer is found (--tokenizer,
    # or the profile's model mount), else `words` with a note saying why; never an error.
    defaulted: bool = False
    trace_scale: float = _B.trace_scale
    range_ratio: float = _B.range_ratio  # words, random: lengths in [len x ratio, len]
    pairs: tuple[tuple[int, int], ...] = ()  # words, random: request i takes pair i mod N
    # Multi-turn chat: sessions of `turns` requests, each sending the session's whole history
    # (its earlier prompts and the server's answers) before its next prompt; `session_width`
    # sessions side by side (each bench phase sets it to its own concurrency: `for_phase`).
    turns: int = _B.multi_turn
    session_width: int = 64

    @classmethod
    def of(cls, settings: BenchSettings) -> WorkloadSpec:
        """The workload the settings ask for; only the default (no dataset name, no
        tokenizer) may fall back to words: a named dataset or --tokenizer must work."""
        return cls(name=settings.dataset or "random",
                   defaulted=settings.dataset is None and settings.tokenizer is None,
                   input_len=settings.input_words, output_len=settings.output_tokens,
                   seed=settings.seed, tokenizer=settings.tokenizer,
                   dataset_path=settings.dataset_path, groups=settings.gsp_groups,
                   prompts_per_group=settings.gsp_prompts_per_group,
                   prefix_len=settings.gsp_prefix_len, trace_scale=settings.trace_scale,
                   turns=settings.multi_turn, range_ratio=settings.range_ratio,
                   pairs=settings.length_pairs)

    def lengths(self, index: int) -> tuple[int, int]:
        """Request `index`'s prompt and answer lengths: its ISL/OSL pair (pair index mod N)
        or the one length pair, exact, or with a range ratio below 1 drawn from [length x
        ratio, length] (seeded by the index, as sglang draws them)."""
        prompt, answer = (self.pairs[index % len(self.pairs)] if self.pairs
                          else (self.input_len, self.output_len))
        if self.range_ratio >= 1:
            return prompt, answer
        rng = random.Random(f"{self.seed}:lengths:{index}")
        return (rng.randint(max(int(prompt * self.range_ratio), 1), prompt),
                rng.randint(max(int(answer * self.range_ratio), 1), answer))


class Workload:
    """The built workload: `item(i)` for any i >= 0, and what a reader should know about it."""

    def __init__(self, name: str, items: list[WorkItem] | None, spec: WorkloadSpec,
                 note: str | None = None, arrivals_s: tuple[float, ...] | None = None) -> None:
        self.name, self.items, self.spec, self.note = name, items, spec, note
        # A trace's arrival times (seconds after its first request, one per item); None: the
        # arrival process is bench's own (closed loop or Poisson).
        self.arrivals_s = arrivals_s
        self.session_start = 0  # multi-turn: the first request of the first session

    def for_phase(self, start: int, width: int) -> Workload:
        """The same prompts with sessions numbered from request `start`, `width` of them side
        by side: a phase at concurrency c keeps c sessions in flight and sends every turn of
        them even when it sends only a few requests (a width above c would leave a short
        phase with first turns only)."""
        phase = Workload(self.name, self.items, replace(self.spec, session_width=max(1, width)),
                         self.note, self.arrivals_s)
        phase.session_start = start
        return phase

    def session_turn(self, index: int) -> tuple[int, int]:
        """(session, turn) of request `index`: `session_width` sessions take their turn t one
        after another, then their turn t + 1, so a session's next turn comes `session_width`
        requests after its previous one (already answered at any lower concurrency)."""
        width, turns = max(1, self.spec.session_width), max(1, self.spec.turns)
        block, offset = divmod(index - self.session_start, width * turns)
        turn, column = divmod(offset, width)
        return block * width + column, turn

    def item(self, index: int) -> WorkItem:
        if self.items is None:
            prompt_len, answer_len = self.spec.lengths(index)
            return WorkItem(make_prompt(index, prompt_len, self.spec.seed), answer_len)
        return self.items[index % len(self.items)]


def parse_length_pairs(text: str | None) -> tuple[tuple[int, int], ...]:
    """`--isl-osl 1024:256,8192:1024` -> ((1024, 256), (8192, 1024)); UsageError (exit 2)."""
    if not text:
        return ()
    pairs = []
    for item in (part.strip() for part in text.split(",")):
        shape = re.fullmatch(r"(\d{1,7}):(\d{1,7})", item)
        if shape is None or min(int(shape[1]), int(shape[2])) < 1:
            raise UsageError(f"--isl-osl {item!r} is not ISL:OSL (two token counts >= 1)",
                             hint="e.g. --isl-osl 1024:256,8192:1024")
        pairs.append((int(shape[1]), int(shape[2])))
    if len(pairs) > MAX_LENGTH_PAIRS:
        raise UsageError(f"--isl-osl names {len(pairs)} pairs, at most {MAX_LENGTH_PAIRS}",
                         hint="judge fewer shapes in one sweep")
    return tuple(pairs)


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
        text = read_bounded(file, "--tokenizer", MAX_TOKENIZER_BYTES).decode()
        loaded: Tokens = Tokenizer.from_str(text)
    except OSError as exc:
        raise UsageError(f"--tokenizer {file}: {exc.strerror or exc}",
                         hint="pass the served model's tokenizer.json or its folder") from None
    except Exception as exc:  # the library raises its own exception type for a bad file
        raise UsageError(f"--tokenizer {file}: not a tokenizer: {str(exc)[:200]}",
                         hint="pass the served model's tokenizer.json or its folder") from None
    if loaded.get_vocab_size(with_added_tokens=False) < 1:
        raise UsageError(f"--tokenizer {file}: its vocabulary is empty: no prompt can be drawn "
                         "from it", hint="pass the served model's tokenizer.json or its folder")
    return loaded


def _tokens(spec: WorkloadSpec) -> tuple[Tokens | None, str | None]:
    """The tokenizer, and when the default `random` could not have one, why (else None)."""
    if spec.tokenizer is None:
        return None, None
    try:
        return load_tokenizer(spec.tokenizer), None
    except UsageError as exc:
        if not spec.defaulted:
            raise
        return None, exc.message


def build(spec: WorkloadSpec) -> Workload:
    if spec.range_ratio < 1 and spec.name not in ("words", "random"):
        raise UsageError(f"--random-range-ratio {spec.range_ratio:g} with --dataset-name "
                         f"{spec.name}: the data sets its lengths",
                         hint="drop --random-range-ratio, or use --dataset-name random")
    if spec.pairs and spec.name not in ("words", "random"):
        raise UsageError(f"--isl-osl with --dataset-name {spec.name}: the data sets its lengths",
                         hint="drop --isl-osl, or use --dataset-name random")
    tokens, unusable = _tokens(spec)
    if spec.name == "sharegpt":
        return _sharegpt(spec, tokens)
    if spec.name == "generated-shared-prefix":
        return _shared_prefix(spec, tokens)
    if spec.name == "mooncake-trace":
        return _mooncake(spec, tokens)
    if spec.name == "random" and tokens is not None:
        rng = random.Random(spec.seed)
        count = max(64, spec.groups * spec.prompts_per_group)
        items = [_exact(tokens, spec.lengths(i)[0], rng, spec.lengths(i)[1])
                 for i in range(count)]
        return Workload("random", items, spec)
    note = ("no --tokenizer: word prompts, about one token per word" if spec.name == "random"
            else None)
    if spec.defaulted:
        note = ("no tokenizer found (" + (unusable or "no --tokenizer, and the profile mounts "
                "none") + "): word prompts, about one token per word; token-exact `random` "
                "needs --tokenizer or the profile's model.host_path")
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
        if (
            isinstance(first, dict)
            and isinstance(second, dict)
            and first.get("from") in ("human", "user")
            and second.get("from") in ("gpt", "assistant")
            and isinstance(first.get("value"), str)
            and isinstance(second.get("value"), str)
            and first["value"].strip()
        ):
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


# --- mooncake-trace: a recorded workload replayed ---------------------------------------------


@dataclass(frozen=True)
class TraceEntry:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def read_trace(path: Path) -> list[TraceEntry]:
    """The Mooncake trace format (kvcache-ai/Mooncake's traces, also read by aiperf and NVIDIA
    Dynamo): JSONL, one request a line, `timestamp` (ms after the first request),
    `input_length` and `output_length` (tokens), `hash_ids` (one id per 512-token block of the
    prompt; requests that start with the same ids share that prefix). UsageError naming the
    line for anything else."""
    try:
        text = read_bounded(path, "--dataset-path", MAX_DATASET_BYTES).decode("utf-8")
    except (OSError, ValueError) as exc:
        raise UsageError(f"--dataset-path {path}: {exc}", hint=TRACE_HINT) from None
    entries: list[TraceEntry] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            entries.append(_trace_entry(path, number, line))
        if len(entries) > MAX_TRACE_REQUESTS:
            raise UsageError(f"--dataset-path {path}: more than {MAX_TRACE_REQUESTS:,} requests",
                             hint="cut the trace, or replay it in parts")
    if not entries:
        raise UsageError(f"--dataset-path {path}: no requests (Mooncake trace JSONL: "
                         '{"timestamp", "input_length", "output_length", "hash_ids"} a line)',
                         hint=TRACE_HINT)
    return entries


def _trace_entry(path: Path, number: int, line: str) -> TraceEntry:
    where = f"--dataset-path {path}:{number}"
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise UsageError(f"{where}: not JSON ({exc})", hint=TRACE_HINT) from None
    if not isinstance(record, dict):
        raise UsageError(f"{where}: not a JSON object", hint=TRACE_HINT)
    stamp, hashes = record.get("timestamp", 0), record.get("hash_ids", [])
    lengths = record.get("input_length"), record.get("output_length")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not 0 <= stamp < 1e15:
        raise UsageError(f"{where}: timestamp must be milliseconds >= 0", hint=TRACE_HINT)
    if any(isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10_000_000
           for n in lengths):
        raise UsageError(f"{where}: input_length and output_length must be token counts >= 1",
                         hint=TRACE_HINT)
    if not isinstance(hashes, list) or any(isinstance(h, bool) or not isinstance(h, int)
                                           or h < 0 for h in hashes):
        raise UsageError(f"{where}: hash_ids must be a list of block ids >= 0", hint=TRACE_HINT)
    return TraceEntry(float(stamp), int(lengths[0]), int(lengths[1]),  # type: ignore[arg-type]
                      tuple(hashes))


TRACE_HINT = ("a Mooncake trace: one JSON object a line, with timestamp (ms), input_length, "
              "output_length and hash_ids")


class _Blocks:
    """The text of each prompt block, made once per block id: TRACE_BLOCK_TOKENS random token
    ids decoded (with a tokenizer) or words (without), seeded by the block id, so equal ids
    give equal text and a shorter use of a block is a prefix of its full text."""

    def __init__(self, tokens: Tokens | None, seed: int) -> None:
        self.tokens, self.seed = tokens, seed
        self._made: dict[tuple[str, int, int], str] = {}

    def text(self, kind: str, key: int, length: int) -> str:
        made = self._made.get((kind, key, length))
        if made is None:
            rng = random.Random(f"{self.seed}:{kind}:{key}")
            size = max(length, TRACE_BLOCK_TOKENS)
            if self.tokens is None:
                made = " ".join(random_words(size, rng)[:length]) + " "
            else:
                made = self.tokens.decode(_random_ids(self.tokens, size, rng)[:length],
                                          skip_special_tokens=True)
            if len(self._made) < 100_000:
                self._made[(kind, key, length)] = made
        return made


def _mooncake(spec: WorkloadSpec, tokens: Tokens | None) -> Workload:
    if spec.dataset_path is None:
        raise UsageError("--dataset-name mooncake-trace needs --dataset-path FILE",
                         hint="give the trace JSONL with --dataset-path")
    if not 0 < spec.trace_scale <= 1e6:
        raise UsageError(f"--trace-scale {spec.trace_scale:g} must be > 0",
                         hint="e.g. --trace-scale 0.5 replays twice as fast")
    entries = read_trace(spec.dataset_path)
    if sum(e.input_length for e in entries) > MAX_WORKLOAD_WORDS:
        raise UsageError(f"--dataset-path {spec.dataset_path}: more than "
                         f"{MAX_WORKLOAD_WORDS:,} prompt tokens in all",
                         hint="cut the trace: every prompt is built up front")
    blocks = _Blocks(tokens, spec.seed)
    items: list[WorkItem] = []
    for number, entry in enumerate(entries):
        parts, left = [], entry.input_length
        for block in entry.hash_ids:
            if left <= 0:
                break
            parts.append(blocks.text("block", block, min(left, TRACE_BLOCK_TOKENS)))
            left -= TRACE_BLOCK_TOKENS
        if left > 0:  # what the trace's blocks do not cover is this request's own
            parts.append(blocks.text("own", number, left))
        prompt = "".join(parts)
        counted = (len(tokens.encode(prompt, add_special_tokens=False).ids) if tokens
                   else None)
        items.append(WorkItem(prompt, entry.output_length, counted))
    first = min(e.timestamp_ms for e in entries)
    arrivals = tuple((e.timestamp_ms - first) / 1000.0 * spec.trace_scale for e in entries)
    if any(later < earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False)):
        raise UsageError(f"--dataset-path {spec.dataset_path}: timestamps go back in time",
                         hint="a Mooncake trace lists requests in arrival order")
    note = (f"Mooncake trace {spec.dataset_path}: {len(items)} requests over "
            f"{arrivals[-1]:g} s (timestamps x {spec.trace_scale:g}), prompts from "
            f"{TRACE_BLOCK_TOKENS}-token blocks by hash_ids ("
            + ("random token ids per block; input_tokens re-counted" if tokens else
               "no tokenizer: about one token per word") + ")")
    return Workload("mooncake-trace", items, spec, note, arrivals)
