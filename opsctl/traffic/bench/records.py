"""Per-request records of a bench level: `requests/<NN>-<variant>/c<N>.jsonl`, and what is
computed from them after the run (goodput against another SLO, sglang's peak figures, the
`--output-details` arrays).

One JSON object per measured request, in the order they finished (warm-up requests are not
recorded; the level counts their failures). Times are seconds, from `time.perf_counter()`:

    {"start_s": 0.0123,          # when its clock started, from the measured phase's start
     "ok": true, "ttft_s": 0.051, "e2e_s": 0.362,
     "gaps_s": [0.0201, ...],    # every inter-chunk gap (split per token where the server
                                 # counted the tokens a chunk carried), as ITL pools them
     "tpot_s": 0.0200,           # (e2e - ttft) / (output_tokens - 1); null when not measurable
     "prompt_tokens": 256, "output_tokens": 16, "finish_reason": "length",
     "error_kind": null, "error": null}

Bounded: at most MAX_RECORDS_PER_LEVEL records and MAX_GAPS_PER_LEVEL gaps per level; past the
gap cap a record keeps its TTFT, TPOT and E2E and drops its gaps (`"gaps_s": null`). The level's
`requests_note` says when either cap cut something, and by how much.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from opsctl.config.sloconfig import Slo, request_is_good
from opsctl.core.errors import UsageError
from opsctl.core.files import atomic_write_bytes, read_bounded
from opsctl.core.redact import redact
from opsctl.core.reports import BENCH_JSON
from opsctl.traffic.bench.report import SCHEMA_VERSION, BenchReport, Goodput
from opsctl.traffic.client import RequestResult

MAX_RECORDS_PER_LEVEL = 50_000
MAX_GAPS_PER_LEVEL = 2_000_000
REQUESTS_DIR = "requests"
# A requests file read back is at most this large (50k records with 2M gaps fit well under it).
MAX_REQUESTS_FILE_BYTES = 256 << 20
MAX_REPORT_BYTES = 64 << 20
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class LevelRecords:
    """One level's kept records and what the caps dropped."""

    records: list[dict[str, Any]] = field(default_factory=list)
    dropped_records: int = 0
    dropped_gaps: int = 0  # records whose gaps were dropped past the gap cap

    def note(self) -> str | None:
        parts = []
        if self.dropped_records:
            parts.append(f"{self.dropped_records} request(s) past the first "
                         f"{MAX_RECORDS_PER_LEVEL} not recorded")
        if self.dropped_gaps:
            parts.append(f"{self.dropped_gaps} request(s) recorded without gaps past "
                         f"{MAX_GAPS_PER_LEVEL} gaps")
        return "truncated: " + "; ".join(parts) if parts else None


def record_level(results: Sequence[RequestResult], phase_started: float,
                 api_key: str | None) -> LevelRecords:
    """The measured phase's results as records, under the caps."""
    kept = LevelRecords()
    gaps = 0
    for result in results[:MAX_RECORDS_PER_LEVEL]:
        with_gaps = gaps + len(result.itl_s) <= MAX_GAPS_PER_LEVEL
        if with_gaps:
            gaps += len(result.itl_s)
        else:
            kept.dropped_gaps += 1
        kept.records.append({
            "start_s": None if result.started is None else result.started - phase_started,
            "ok": result.ok, "ttft_s": result.ttft_s, "e2e_s": result.e2e_s,
            "gaps_s": result.itl_s if with_gaps else None, "tpot_s": result.tpot_s,
            "prompt_tokens": result.prompt_tokens, "output_tokens": result.output_tokens,
            "finish_reason": result.finish_reason, "error_kind": result.error_kind,
            "error": None if result.error is None else redact(result.error, api_key),
        })
    kept.dropped_records = max(0, len(results) - MAX_RECORDS_PER_LEVEL)
    return kept


def level_path(variant_index: int, variant: str, concurrency: int, level_index: int,
               taken: set[str]) -> str:
    """The file's path relative to the bench directory; unique within the run."""
    base = f"{REQUESTS_DIR}/{variant_index + 1:02d}-{_UNSAFE.sub('_', variant)}/c{concurrency}"
    path = f"{base}.jsonl"
    if path in taken:
        path = f"{base}-{level_index + 1}.jsonl"
    taken.add(path)
    return path


def encode(records: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(record) + b"\n" for record in records)


def write_levels(out_dir: Path, levels: Iterable[tuple[str, LevelRecords]]) -> list[Path]:
    return [atomic_write_bytes(out_dir / path, encode(kept.records)) for path, kept in levels]


def read_records(path: Path) -> list[dict[str, Any]]:
    """A requests file written by bench; UsageError (one line) for one that is not."""
    data = _read(path, "requests file", MAX_REQUESTS_FILE_BYTES)
    records = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("ok"), bool):
            raise UsageError(f"{path}:{number}: not a request record",
                             hint="the file is bench's requests.jsonl, unedited")
        records.append(record)
    return records


def _read(path: Path, what: str, max_bytes: int) -> bytes:
    try:
        return read_bounded(path, what, max_bytes)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in a recorded path
        raise UsageError(f"{what} {path}: {getattr(exc, 'strerror', None) or exc}",
                         hint="pass the directory a bench run wrote (bench.json, requests/)"
                         ) from None


def _number(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def judge(slo: Slo, requests: Sequence[tuple[bool, float | None, float | None]],
          duration_s: float) -> Goodput:
    """Goodput of measured requests, each (ok, ttft_s, tpot_s): those meeting every stated
    limit, their share of all (failures included) and rate over `duration_s`, and each limit's
    own share (a failed request or a missing measurement meets none)."""
    good = sum(1 for ok, ttft, tpot in requests if ok and request_is_good(slo, ttft, tpot))
    by_metric = {}
    for name, objective, at in (("ttft", slo.ttft, 1), ("tpot", slo.tpot, 2)):
        if objective is not None and requests:
            met = sum(1 for r in requests if r[0] and (value := r[at]) is not None
                      and value <= objective.threshold_seconds)
            by_metric[name] = round(met / len(requests), 4)
    return Goodput(
        ttft_ms=slo.ttft.threshold_ms if slo.ttft else None,
        tpot_ms=slo.tpot.threshold_ms if slo.tpot else None,
        good=good, share=round(good / len(requests), 4) if requests else None,
        rate_per_s=round(good / duration_s, 4) if duration_s > 0 else 0.0, by_metric=by_metric,
    )


def rescore(records: Sequence[dict[str, Any]], slo: Slo, duration_s: float) -> Goodput:
    """Goodput of a level against `slo`, from its records (stats.goodput's meaning)."""
    return judge(slo, [(r.get("ok") is True, _number(r, "ttft_s"), _number(r, "tpot_s"))
                       for r in records], duration_s)


def peaks(results: Sequence[RequestResult]) -> tuple[float | None, int | None]:
    """sglang.bench_serving's max_output_tokens_per_s and max_concurrent_requests over the
    successful requests (its calculate_metrics): one-second buckets from the earliest start;
    a token counted at start + TTFT + each gap in turn; a request in every bucket from the one
    it started in to the one it ended in. None without a timed success."""
    timed = [r for r in results if _timed(r)]
    if not timed:
        return None, None
    first = min(r.started or 0.0 for r in timed)
    last = max((r.started or 0.0) + (r.e2e_s or 0.0) for r in timed)
    buckets = int(math.ceil(last - first)) + 1
    tokens = [0] * buckets
    running = [0] * buckets
    for r in timed:
        _count(r, (r.started or 0.0) - first, tokens, running)
    return float(max(tokens)), max(running)


def _timed(result: RequestResult) -> bool:
    """A success with a start, a TTFT and an end-to-end time."""
    return (result.ok and result.started is not None and result.ttft_s is not None
            and result.e2e_s is not None)


def _count(result: RequestResult, start: float, tokens: list[int], running: list[int]) -> None:
    """One request's tokens into the seconds they came in, and the request into every second
    from the one it started in to the one it ended in (`start`: seconds after the first)."""
    buckets = len(tokens)
    at = start + (result.ttft_s or 0.0)
    tokens[min(int(at), buckets - 1)] += 1
    for gap in result.itl_s:
        at += gap
        second = int(at)
        if second < buckets:
            tokens[second] += 1
    for second in range(int(start), min(int(start + (result.e2e_s or 0.0)) + 1, buckets)):
        running[second] += 1


def details(records: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """sglang.bench_serving's `--output-details` arrays over the level's measured requests
    (seconds, as it writes them; a failed request's output length is 0 there and here).
    opsctl's bench keeps no generated text, so `generated_texts` holds null per request."""
    return {
        "input_lens": [r.get("prompt_tokens") for r in records],
        "output_lens": [r.get("output_tokens") if r.get("ok") else 0 for r in records],
        "ttfts": [r.get("ttft_s") for r in records],
        "itls": [r.get("gaps_s") or [] for r in records],
        "generated_texts": [None for _ in records],
        "errors": [r.get("error") or "" for r in records],
    }


def load_report(directory: Path) -> BenchReport:
    """The bench.json of a bench run's directory; UsageError (one line) when it is none."""
    path = directory / BENCH_JSON
    data = _read(path, "bench report", MAX_REPORT_BYTES)
    try:
        report = BenchReport.model_validate_json(data)
    except ValueError:
        raise UsageError(f"{path}: not a bench report of schema_version {SCHEMA_VERSION}",
                         hint="pass the directory of a bench run this opsctl wrote (bench.json, "
                              "requests/)") from None
    _check_requests_files(path, report)
    return report


def _check_requests_files(path: Path, report: BenchReport) -> None:
    """Each level names its own requests file (bench writes one per level: `level_path`), a
    relative path without a NUL byte: a report naming one file for many levels would have it
    parsed once per level (a 256 MiB file, hundreds of times)."""
    seen: set[str] = set()
    for variant in report.variants:
        for level in variant.levels:
            name = level.requests_file
            if name is None:
                continue
            key = os.path.normpath(name) if name else name  # requests//a and requests/a
            if "\0" in name or not name or Path(name).is_absolute() or key in seen:
                why = "named by two levels" if key in seen else "not a relative path"
                raise UsageError(f"{path}: requests file {name[:120]!r} is {why}",
                                 hint="pass the directory of a bench run this opsctl wrote, "
                                      "unedited")
            seen.add(key)


def rescore_report(directory: Path, slo: Slo) -> BenchReport:
    """The bench run in `directory` with every recorded level's goodput judged by `slo` from
    its requests file (nothing is re-run); levels without one keep no goodput and say why."""
    report = load_report(directory)
    report.config.slo_ttft_ms = slo.ttft.threshold_ms if slo.ttft else None
    report.config.slo_tpot_ms = slo.tpot.threshold_ms if slo.tpot else None
    for variant in report.variants:
        for level in variant.levels:
            if level.requests_file is None:
                level.goodput = None
                level.notes.append("not re-scored: the level has no requests file")
                continue
            records = read_records(directory / level.requests_file)
            level.goodput = rescore(records, slo, level.duration_s)
            if level.requests_note:
                level.notes.append(
                    f"re-scored over the recorded requests only ({level.requests_note})"
                )
    return report
