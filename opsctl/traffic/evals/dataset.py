"""GSM8K-shaped datasets read from local files and pinned by sha256: nothing is downloaded.

A dataset is JSONL, one ``{"question": str, "answer": str}`` object per line, the answer ending
in ``#### <number>`` (the shape of openai/grade-school-math ``grade_school_math/data/test.jsonl``,
the file sglang 0.5.23 downloads in ``test/few_shot_gsm8k.py:69``). Lines starting with ``#``
are skipped as sglang's ``utils.py:134-140`` ``read_jsonl`` skips them; blank lines are skipped
too. The file's sha256 must equal the pin the caller passes (from the profile): the same
questions every run, or no comparison between runs means anything.

Getting the real file: no package on PyPI ships GSM8K (``aviary-gsm8k`` loads it from the
Hugging Face hub at run time), and opsctl does not redistribute it. Fetch ``test.jsonl`` (and
``train.jsonl`` for few-shot examples from the train split) from the openai/grade-school-math
repository on a host with network access, run ``sha256sum`` on it, and put the path and the
printed hash in the profile.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from opsctl.core.errors import UsageError
from opsctl.core.files import open_regular
from opsctl.traffic.evals.extract import extract_answer

MAX_DATASET_BYTES = 64 * 1024 * 1024  # the GSM8K test split is under 1 MiB
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_FINAL_ANSWER_RE = re.compile(r"####\s*\S")


class DatasetError(UsageError):
    """A dataset file that is missing, malformed, or not the one pinned (exit 2)."""

    default_hint = ('a GSM8K-shaped JSONL file: one {"question": ..., "answer": "... #### N"} '
                    "object a line, pinned by its sha256")


@dataclass(frozen=True)
class Gsm8kItem:
    """One question; ``label`` is read from ``answer`` by sglang's rule (extract.py)."""

    question: str
    answer: str
    label: int
    line: int


@dataclass(frozen=True)
class Dataset:
    path: Path
    sha256: str
    items: tuple[Gsm8kItem, ...]


def normalize_pin(pin: str) -> str:
    value = pin.strip().lower()
    if not _SHA256_RE.fullmatch(value):
        raise DatasetError(f"dataset sha256 pin {pin!r} is not 64 hex digits",
                           hint="pin the output of `sha256sum FILE` for the file you fetched")
    return value


def load_gsm8k(path: Path, sha256: str) -> Dataset:
    """Read and validate a GSM8K-shaped JSONL file whose sha256 must equal ``sha256``."""
    pin = normalize_pin(sha256)
    try:
        # Regular files only, the cap checked while reading (a FIFO blocked, /dev/zero ran out
        # of memory: `stat` says 0 bytes for both).
        with open_regular(path, "dataset") as handle:
            raw = handle.read(MAX_DATASET_BYTES + 1)
    except FileNotFoundError as exc:
        raise DatasetError(f"{path}: {exc.strerror}",
                           hint="fetch the file on this host and pin its sha256") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_DATASET_BYTES:
        raise DatasetError(f"{path}: more than the {MAX_DATASET_BYTES} bytes accepted",
                           hint="is this a GSM8K-shaped JSONL file?")
    actual = hashlib.sha256(raw).hexdigest()
    if actual != pin:
        raise DatasetError(f"{path}: sha256 {actual} does not match the pin {pin}",
                           hint="the file changed or is another one; fetch it again, or check it "
                                "and update the pin")
    return Dataset(path=path, sha256=actual, items=_parse(path, raw))


def _parse(path: Path, raw: bytes) -> tuple[Gsm8kItem, ...]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    items: list[Gsm8kItem] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        items.append(_item(path, number, line.rstrip("\r")))
    if not items:
        raise DatasetError(f"{path}: no questions in the file")
    return tuple(items)


def _item(path: Path, number: int, line: str) -> Gsm8kItem:
    where = f"{path}:{number}"
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise DatasetError(f"{where}: not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: not a JSON object")
    question, answer = record.get("question"), record.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise DatasetError(f'{where}: "question" must be a non-empty string')
    if not isinstance(answer, str) or not _FINAL_ANSWER_RE.search(answer):
        raise DatasetError(f'{where}: "answer" must be a string ending in "#### <number>"')
    label = extract_answer(answer)
    if label is None:
        raise DatasetError(f"{where}: no integer answer after ####")
    return Gsm8kItem(question=question, answer=answer, label=label, line=number)
