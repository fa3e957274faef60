"""One level of `bench --driver sglang-bench`: sglang.bench_serving's result row as a LevelResult.

The keys are the ones bench_serving writes to `--output-file` (0.5.23's
`sglang/benchmark/serving.py`, and 0.5.9's `sglang/bench_serving.py`, the peer client of
scripts/peer-bench-env.sh; opsctl.traffic.bench.serving writes the same shape): `completed`,
`duration`, `total_input_tokens`, `total_output_tokens`, `request_throughput`, `output_throughput`
and `<stat>_<figure>_ms` for the figures ttft, tpot, itl and e2e_latency. Only what the row holds is
taken; a statistic a release does not write (0.5.9 has no p90/p95 of TTFT or TPOT, neither writes a
max) stays None and the level's `notes` say so, as for every figure bench_serving does not give
(warm-up failures, goodput, client CPU).

bench_serving writes 0 for a statistic of an empty sample (`np.mean(x or 0)`): with no
completed request, or no ITL/TPOT gap at all (answers of one chunk), those zeros are dropped.
"""

from __future__ import annotations

import math
from typing import Any

from opsctl.core.answers import Malformed, decode_json, snippet
from opsctl.traffic.bench.report import LevelResult, Pcts

# (LevelResult field, bench_serving's figure stem): e.g. mean_ttft_ms, p99_e2e_latency_ms.
_FIGURES = (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"), ("e2e_ms", "e2e_latency"))
# (Pcts field, bench_serving's statistic prefix); numpy's median is the linear p50.
_STATS = (("mean", "mean"), ("p50", "median"), ("std", "std"), ("p90", "p90"), ("p95", "p95"),
          ("p99", "p99"), ("max", "max"))
SOURCE = "sglang.bench_serving"


def parse_row(data: bytes) -> dict[str, Any]:
    """The one JSON object a fresh `--output-file` holds; Malformed (one line) otherwise."""
    lines = [line for line in data.splitlines() if line.strip()]
    if len(lines) != 1:
        raise Malformed(f"{len(lines)} result lines, not one")
    row = decode_json(lines[0])
    if not isinstance(row, dict):
        raise Malformed(f"the result line is not a JSON object: {snippet(lines[0])}")
    return row


def level_from_row(row: dict[str, Any], concurrency: int, requests: int,
                   notes: list[str]) -> LevelResult:
    """The level bench_serving measured at `concurrency`, asked for `requests` requests;
    `notes` (what the driver knows about the run) come first in the level's notes."""
    completed = _completed(row, concurrency, requests)
    duration = _number(row, "duration", required=True) or 0.0
    output_tokens = _count(row, "total_output_tokens")
    input_tokens = _number(row, "total_input_tokens")
    figures, missing, empty = _figures(row, completed)
    failed = max(0, requests - completed)
    return LevelResult(
        concurrency=concurrency, requests=requests, completed=completed, failed=failed,
        warmup_requests=0, warmup_failed=0,
        **_unreported(failed, requests),
        duration_s=round(duration, 4), output_tokens=output_tokens,
        **_inputs(row, input_tokens, completed),
        output_tokens_per_s=round(_number(row, "output_throughput", required=True) or 0.0, 3),
        requests_per_s=round(_number(row, "request_throughput", required=True) or 0.0, 4),
        token_count_source=SOURCE, itl_note=f"per chunk, as {SOURCE} measures it",
        notes=_level_notes(notes, missing, empty if completed else []), **figures,
    )


def _completed(row: dict[str, Any], concurrency: int, requests: int) -> int:
    """The row's completed requests, once the row is shown to be this level's."""
    asked = _number(row, "max_concurrency")
    if asked != concurrency:
        raise Malformed(f"the row is for max_concurrency {asked!r}, not {concurrency}")
    completed = _count(row, "completed")
    if completed > requests:
        raise Malformed(f"the row has {completed} completed requests, more than the {requests} "
                        "asked for")
    return completed


def _figures(row: dict[str, Any], completed: int) -> tuple[dict[str, Pcts], list[str], list[str]]:
    """Each latency's percentiles; the keys the row lacks; the figures it wrote as zeros for an
    empty sample (left empty)."""
    figures: dict[str, Pcts] = {}
    missing: list[str] = []
    empty: list[str] = []
    for field, stem in _FIGURES:
        values = {attr: _number(row, f"{prefix}_{stem}_ms") for attr, prefix in _STATS}
        missing += [f"{prefix}_{stem}_ms" for attr, prefix in _STATS if values[attr] is None]
        present = {attr: round(value, 4) for attr, value in values.items() if value is not None}
        if completed == 0 or (present and not any(present.values())):
            empty.append(stem)
            present = {}
        figures[field] = Pcts(**present)
    return figures, missing, empty


def _unreported(failed: int, requests: int) -> dict[str, Any]:
    """The requests that did not complete: the row does not say why."""
    if not failed:
        return {"errors": {}, "error_examples": []}
    return {"errors": {"unreported": failed},
            "error_examples": [f"{failed} of {requests} request(s) did not complete; "
                               f"{SOURCE}'s row does not say why"]}


def _inputs(row: dict[str, Any], input_tokens: float | None, completed: int) -> dict[str, Any]:
    """The prompt side: none where nothing completed or the row has no input tokens."""
    rate = _rate(row, "input_throughput") if completed else None
    if input_tokens is None or not completed:
        return {"prompt_tokens_mean": None, "input_tokens": None, "input_tokens_per_s": rate}
    return {"prompt_tokens_mean": round(input_tokens / completed, 2),
            "input_tokens": int(input_tokens), "input_tokens_per_s": rate}


def _level_notes(notes: list[str], missing: list[str], empty: list[str]) -> list[str]:
    """The driver's notes, then what the row lacked or wrote as zeros."""
    level_notes = list(notes)
    if missing:
        level_notes.append(f"not in {SOURCE}'s row (left empty): {', '.join(missing)}")
    if empty:
        level_notes.append(f"{', '.join(empty)}: {SOURCE} wrote 0 for an empty sample (answers "
                           "of one chunk); left empty")
    return level_notes


def _number(row: dict[str, Any], key: str, *, required: bool = False) -> float | None:
    value = row.get(key)
    if value is None:
        if required:
            raise Malformed(f"no {key!r} in the result row")
        return None
    try:  # an int too large for a float is no figure either
        number = math.nan if isinstance(value, bool) or not isinstance(value, int | float) \
            else float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise Malformed(f"{key!r} is {snippet(repr(value))}, not a non-negative number")
    return number


def _rate(row: dict[str, Any], key: str) -> float | None:
    value = _number(row, key)
    return None if value is None else round(value, 3)


def _count(row: dict[str, Any], key: str) -> int:
    value = _number(row, key, required=True)
    if value is None or value != int(value):
        raise Malformed(f"{key!r} is {value!r}, not a count")
    return int(value)
