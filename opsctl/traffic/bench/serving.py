"""Each level of a bench run as one JSON line in sglang.bench_serving's result shape.

The key names are the ones sglang 0.5.23's `sglang/benchmark/serving.py` writes to its result
JSONL (and `goodput.py` for goodput), so a level lines up with a published run. Only figures
opsctl measures the same way are written; keys it cannot fill honestly are left out, not
zeroed: `total_input_tokens` and the throughputs that need it appear only when the server
counted every completed request's prompt (sglang counts with its own tokenizer, opsctl with the
server's usage); `median_*` is the p50 (numpy's median is the linear-interpolated p50);
`concurrency` is the sum of E2E latencies over the duration, as sglang defines it. Keys sglang
writes that opsctl adds (`tag` aside) are under `opsctl`, so nothing reads them as sglang's.

Also as sglang writes them (its `benchmark()` result dict and `calculate_metrics`, read in
sgl-project/sglang python/sglang/benchmark/serving.py; 0.5.9's bench_serving.py writes the same
keys, tests/fixtures/bench_serving/): `random_input_len`, `random_output_len`,
`random_range_ratio` (the workload's lengths, 1.0 as they are exact; null where the data sets
them), `server_info` (GET /server_info after the sweep), `max_output_tokens_per_s` and
`max_concurrent_requests` (one-second buckets over the level; opsctl places a token at each
gap, per token where the server counted them, sglang at each chunk) and, with
`--output-details`, the per-request `input_lens`, `output_lens`, `ttfts`, `itls` (seconds),
`generated_texts` (null: bench keeps no text) and `errors`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opsctl.core.files import atomic_write_text
from opsctl.core.reports import BENCH_JSON, BENCH_MARKDOWN, BENCH_SERVING_JSONL
from opsctl.traffic.bench.drivers import backend_name
from opsctl.traffic.bench.markdown import markdown_table
from opsctl.traffic.bench.records import details, write_levels
from opsctl.traffic.bench.report import BenchReport, LevelResult, Pcts, VariantResult

# (sglang's metric stem, the level's field): e.g. mean_ttft_ms, p99_e2e_latency_ms.
_FIGURES = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "itl_ms"),
            ("e2e_latency", "e2e_ms"))
_STATS = (("mean", "mean"), ("median", "p50"), ("std", "std"), ("p90", "p90"), ("p95", "p95"),
          ("p99", "p99"))


def level_row(report: BenchReport, variant: VariantResult, level: LevelResult,
              records: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One level's row; with `records` (its per-request records) the `--output-details`
    arrays are added, as sglang adds them."""
    config = report.config
    duration = level.duration_s
    row: dict[str, Any] = {
        "tag": variant.variant,
        "backend": backend_name(config.driver, config.settings.api),
        "dataset_name": config.dataset_name,
        "request_rate": config.settings.request_rate,  # null: closed loop (sglang writes inf)
        "max_concurrency": level.concurrency,
        "random_input_len": config.random_input_len,
        "random_output_len": config.random_output_len,
        "random_range_ratio": config.random_range_ratio,
        "server_info": variant.server_info,
        "duration": duration,
        "completed": level.completed,
        "total_output_tokens": level.output_tokens,
        "request_throughput": level.requests_per_s,
        "output_throughput": level.output_tokens_per_s,
    }
    if level.input_tokens is not None and duration > 0:
        row["total_input_tokens"] = level.input_tokens
        row["input_throughput"] = round(level.input_tokens / duration, 3)
        row["total_throughput"] = round((level.input_tokens + level.output_tokens) / duration, 3)
    for stem, field in _FIGURES:
        pcts: Pcts = getattr(level, field)
        for prefix, attr in _STATS:
            value = getattr(pcts, attr)
            if value is not None:
                row[f"{prefix}_{stem}_ms"] = value
    if level.e2e_ms.mean is not None and duration > 0:
        row["concurrency"] = round(level.e2e_ms.mean * level.completed / 1000.0 / duration, 4)
    if level.max_output_tokens_per_s is not None:
        row["max_output_tokens_per_s"] = level.max_output_tokens_per_s
        row["max_concurrent_requests"] = level.max_concurrent_requests
    good = level.goodput
    if good is not None and good.share is not None:
        slos = {name: ms for name, ms in (("ttft", good.ttft_ms), ("tpot", good.tpot_ms))
                if ms is not None}
        row.update(goodput_slos_ms=slos, request_goodput=good.rate_per_s,
                   slo_attainment=good.share)
    row["opsctl"] = {"failed": level.failed + level.warmup_failed,
                     "token_count_source": level.token_count_source,
                     "itl_note": level.itl_note, "aborted": level.aborted,
                     "arrival": config.arrival, "started_at": report.started_at,
                     "requests_file": level.requests_file, "requests_note": level.requests_note}
    if records is not None:
        row.update(details(records))
    return row


def jsonl(report: BenchReport, output_details: bool = False) -> str:
    """One line per (variant, level), in run order; with `output_details`, each with the
    per-request arrays of the records this run kept."""
    kept = dict(report._requests or []) if output_details else {}
    lines = []
    for variant in report.variants:
        for level in variant.levels:
            found = kept.get(level.requests_file) if level.requests_file else None
            records = found.records if found is not None else ([] if output_details else None)
            lines.append(json.dumps(level_row(report, variant, level, records)) + "\n")
    return "".join(lines)


def write_report_files(report: BenchReport, out_dir: Path, output_details: bool = False
                       ) -> list[Path]:
    """bench.json, bench.md, bench_serving.jsonl and each level's requests file, each written
    afresh (never appended); the plots are the view's."""
    return [
        atomic_write_text(out_dir / BENCH_JSON, report.model_dump_json(indent=2) + "\n"),
        atomic_write_text(out_dir / BENCH_MARKDOWN, markdown_table(report)),
        atomic_write_text(out_dir / BENCH_SERVING_JSONL, jsonl(report, output_details)),
        *write_levels(out_dir, report._requests or []),
    ]
