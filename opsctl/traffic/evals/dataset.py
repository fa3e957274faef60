"""GSM8K-shaped datasets read from local files and pinned by sha256, and the one public file
opsctl downloads itself (`public_file`: GSM8K's test split, config/datasets.py).

A dataset is JSONL, one ``{"question": str, "answer": str}`` object per line, the answer ending
in ``#### <number>`` (the shape of openai/grade-school-math ``grade_school_math/data/test.jsonl``,
the file sglang 0.5.23 downloads in ``test/few_shot_gsm8k.py:69``). Lines starting with ``#``
are skipped as sglang's ``utils.py:134-140`` ``read_jsonl`` skips them; blank lines are skipped
too. The file's sha256 must equal the pin the caller passes (from the profile): the same
questions every run, or no comparison between runs means anything.

Getting the real file: no package on PyPI ships GSM8K, and opsctl does not redistribute it. A
profile whose eval.gsm8k names no dataset gets the test split downloaded from its source at a
pinned commit into the state directory, once, kept only when its sha256 is the pin. Another
file (a train split for few-shot examples, a private set) is named in the profile with its pin.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from opsctl.config.datasets import MIRROR_ENV, PublicDataset
from opsctl.core.answers import snippet
from opsctl.core.errors import HostNotReady, UsageError
from opsctl.core.files import atomic_write_bytes, open_regular
from opsctl.core.paths import default_state_dir
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


FETCH_TIMEOUT_S = 60.0  # the whole download: a source that drips bytes is cut off too


def public_file(dataset: PublicDataset, folder: Path | None = None,
                transport: httpx.BaseTransport | None = None) -> Path:
    """The pinned public file in `<state dir>/datasets/`, downloaded once (from its source, or
    the mirror $OPSCTL_DATASETS_URL names) and kept only when its sha256 is the pin. A host
    without network gets one line saying where to put the file."""
    target = (folder or default_state_dir() / "datasets") / dataset.name
    if _has_pin(target, dataset.sha256):
        return target
    url = _mirrored(dataset.url)
    body = _download(url, dataset, transport)
    actual = hashlib.sha256(body).hexdigest()
    if actual != dataset.sha256:
        raise HostNotReady(f"{url} served a file whose sha256 {actual} is not the pin "
                           f"{dataset.sha256}", hint="the source or a mirror changed it; opsctl "
                           "scores only the pinned file (config/datasets.py)")
    atomic_write_bytes(target, body)
    return target


def _has_pin(path: Path, sha256: str) -> bool:
    try:
        with open_regular(path, "dataset") as handle:
            return hashlib.sha256(handle.read(MAX_DATASET_BYTES + 1)).hexdigest() == sha256
    except OSError:
        return False


def _mirrored(url: str) -> str:
    base = os.environ.get(MIRROR_ENV, "").rstrip("/")
    if not base:
        return url
    try:
        parsed = httpx.URL(base)
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"${MIRROR_ENV} is {snippet(base)}, not an http(s) URL",
                         hint=f"set ${MIRROR_ENV} to a mirror's base URL, or unset it")
    return base + "/" + url.split("://", 1)[1].split("/", 1)[1]


def _download(url: str, dataset: PublicDataset, transport: httpx.BaseTransport | None) -> bytes:
    cap = dataset.size + 4096
    where = default_state_dir() / "datasets" / dataset.name
    offline = (f"or put the file (sha256 {dataset.sha256}) at {where}; --skip-eval (decide) "
               "runs without it")
    deadline = time.monotonic() + FETCH_TIMEOUT_S
    try:
        with httpx.Client(transport=transport, timeout=FETCH_TIMEOUT_S,
                          follow_redirects=True) as client, client.stream("GET", url) as answer:
            if answer.status_code != 200:
                raise HostNotReady(f"downloading {dataset.source} from {url}: HTTP "
                                   f"{answer.status_code}", hint=f"try again later, {offline}")
            body = bytearray()
            for chunk in answer.iter_bytes():
                body += chunk
                if len(body) > cap:
                    raise HostNotReady(f"{url} sent more than the {cap} bytes expected",
                                       hint=f"check ${MIRROR_ENV}, {offline}")
                if time.monotonic() > deadline:
                    raise HostNotReady(f"{url} sent {len(body)} of {dataset.size} bytes in "
                                       f"{FETCH_TIMEOUT_S:.0f} s", hint=f"try again later, "
                                       f"{offline}")
            return bytes(body)
    except httpx.HTTPError as exc:
        raise HostNotReady(f"cannot download {dataset.source} from {url}: "
                           f"{type(exc).__name__}", hint=f"check this host's network, {offline}"
                           ) from None
