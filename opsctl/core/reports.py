"""Where smoke and bench write their reports, and how the exporter finds the newest ones.

Written by the traffic room, read by the observe room's exporter: the names live here only.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

REPORTS_DIR = Path("out")
SMOKE_PREFIX = "smoke-"
SMOKE_GLOB = "smoke-*.json"  # out/smoke-<UTC stamp>.json
BENCH_DIR_PREFIX = "bench-"
BENCH_JSON = "bench.json"
BENCH_MARKDOWN = "bench.md"
BENCH_SERVING_JSONL = "bench_serving.jsonl"  # one line per level, sglang.bench_serving's keys
BENCH_SERVING_CSV = "bench_serving.csv"  # the same rows as a spreadsheet, one per level
BENCH_GLOB = f"{BENCH_DIR_PREFIX}*/{BENCH_JSON}"  # out/bench-<UTC stamp>/bench.json
DECIDE_DIR_PREFIX = "decide-"  # out/decide-<UTC stamp>/decide.json, decide.md
DECIDE_JSON = "decide.json"
DECIDE_MARKDOWN = "decide.md"
DOCTOR_PREFIX = "doctor-"  # out/doctor-<UTC stamp>.json
# `decide --rescore DIR`: the same run judged again from its files, beside the original.
DECIDE_RESCORED_JSON = "decide-rescored.json"
DECIDE_RESCORED_MARKDOWN = "decide-rescored.md"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"


def stamp(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.UTC)).strftime(STAMP_FORMAT)


def default_smoke_path(now: dt.datetime | None = None) -> Path:
    return REPORTS_DIR / f"{SMOKE_PREFIX}{stamp(now)}.json"


def default_bench_dir(now: dt.datetime | None = None) -> Path:
    return REPORTS_DIR / f"{BENCH_DIR_PREFIX}{stamp(now)}"


def default_decide_dir(now: dt.datetime | None = None) -> Path:
    return REPORTS_DIR / f"{DECIDE_DIR_PREFIX}{stamp(now)}"


def default_doctor_path(now: dt.datetime | None = None) -> Path:
    return REPORTS_DIR / f"{DOCTOR_PREFIX}{stamp(now)}.json"
