"""Each level of a bench run as one JSON line in sglang.bench_serving's result shape, and the
same rows as a CSV.

The key names are the ones sglang 0.5.23's `sglang/benchmark/serving.py` writes to its result
JSONL (its `benchmark()` result dict, serving.py:1855-1908, `goodput.py` for goodput, and the
`cache_report` of serving.py:1913-1922), so a level lines up with a published run. Only
figures opsctl measures are written; keys it cannot fill honestly are left out, not zeroed:
`total_input_tokens` and the throughputs that need it appear only when the server counted
every completed request's prompt (sglang counts with its own tokenizer, opsctl with the
server's usage); `median_*` is the p50 (numpy's median is the linear-interpolated p50);
`concurrency` is the sum of E2E latencies over the duration, as sglang defines it. Keys sglang
writes that opsctl adds (`tag` aside) are under `opsctl`, so nothing reads them as sglang's.

Also as sglang writes them: `random_input_len`, `random_output_len`, `random_range_ratio` (the
workload's lengths, 1.0 as they are exact; null where the data sets them), `server_info` (GET
/server_info after the sweep), `max_output_tokens_per_s` and `max_concurrent_requests`
(one-second buckets over the level; opsctl places a token at each gap, per token where the
server counted them, sglang at each chunk) and, with `--output-details`, the per-request
`input_lens`, `output_lens`, `ttfts`, `itls` (seconds), `generated_texts` (null: bench keeps
no text) and `errors`. And, each with its meaning:

- `accept_length`: mean tokens per speculative verify step (accepted drafts + the bonus token;
  MTP variants). sglang reads `internal_states[0].avg_spec_accept_length` of /server_info
  once after the run (serving.py:1641-1662); opsctl the server's `sglang:spec_accept_length`
  gauge averaged over the level's measured phase, so the figure is the level's own. null: no
  speculation (the server exports 0) or the server was not sampled, as sglang writes None.
- `slo_attainment_by_metric` (with `goodput_slos_ms`, `request_goodput`, `slo_attainment`):
  per stated limit, the share of measured requests meeting that limit alone (goodput.py:
  24-53). One difference: sglang counts a one-token answer's TPOT as 0 (met), opsctl as not
  measured (not met).
- `cache_report`: `total_prompt_tokens`, `total_cached_tokens`, `cache_hit_rate_pct` (cached /
  prompt x 100, 2 decimals) and `device_`/`host_`/`storage_cached_tokens` (null without the
  source breakdown; `storage_backend` null: the counter does not name it). sglang sums each
  request's `cached_tokens` from its responses (serving.py:1793-1816, with --cache-report);
  opsctl reads the server's own counters `sglang:prompt_tokens_total` and
  `sglang:cached_tokens_total` at the start and end of the measured phase (the same numbers
  the server adds per finished request, summed over the level's requests; traffic from
  others during the level counts too). Left out when the server was not sampled or exports
  no such counter.

Left out as opsctl cannot measure them: `total_output_tokens_retokenized` (needs the answer
text and a tokenizer; bench keeps no text), `total_input_text_tokens` and
`total_input_vision_tokens` (text only: equal to the input tokens), `sharegpt_output_len` (an
argument of sglang's ShareGPT loader), and the per-request `cached_tokens` arrays.

bench_serving.csv: one row per level, every scalar key of the JSONL row as a column in first-
seen order, a nested object's scalars as `object.key` (`opsctl.failed`,
`cache_report.cache_hit_rate_pct`, `slo_attainment_by_metric.ttft`); `server_info` and the
per-request arrays stay in the JSONL only. A text cell starting with = + - @, a tab or a carriage
return (a variant named so) gets a leading apostrophe, so no spreadsheet runs it as a formula.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opsctl.core.files import atomic_write_text
from opsctl.core.reports import (
    BENCH_JSON,
    BENCH_MARKDOWN,
    BENCH_SERVING_CSV,
    BENCH_SERVING_JSONL,
)
from opsctl.traffic.bench.drivers import backend_name
from opsctl.traffic.bench.markdown import markdown_table
from opsctl.traffic.bench.records import details, write_levels
from opsctl.traffic.bench.report import BenchReport, LevelResult, Pcts, VariantResult
from opsctl.traffic.bench.server_sampler import CacheFigure

# Keys sglang 0.5.23's result dict has that opsctl never writes (the module docstring says why).
NOT_MEASURED = ("total_output_tokens_retokenized", "total_input_text_tokens",
                "total_input_vision_tokens", "sharegpt_output_len")
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
    row.update(_input_fields(level))
    row.update(_figure_fields(level))
    row.update(_load_fields(level))
    server = level.server
    accept = server.spec_accept_length if server else None
    row["accept_length"] = accept.mean if accept else None
    row.update(_goodput_fields(level))
    if server is not None and server.cache is not None:
        row["cache_report"] = cache_report(server.cache)
    row["opsctl"] = {"failed": level.failed + level.warmup_failed,
                     "token_count_source": level.token_count_source,
                     "itl_note": level.itl_note, "aborted": level.aborted,
                     "arrival": config.arrival, "started_at": report.started_at,
                     "requests_file": level.requests_file, "requests_note": level.requests_note}
    if records is not None:
        row.update(details(records))
    return row


def _input_fields(level: LevelResult) -> dict[str, Any]:
    """The prompt tokens and the input and total throughput, where they were counted."""
    duration = level.duration_s
    if level.input_tokens is None or duration <= 0:
        return {}
    return {"total_input_tokens": level.input_tokens,
            "input_throughput": round(level.input_tokens / duration, 3),
            "total_throughput": round((level.input_tokens + level.output_tokens) / duration, 3)}


def _figure_fields(level: LevelResult) -> dict[str, Any]:
    """Each latency statistic measured, under sglang's name (e.g. p99_e2e_latency_ms)."""
    fields = {}
    for stem, field in _FIGURES:
        pcts: Pcts = getattr(level, field)
        for prefix, attr in _STATS:
            value = getattr(pcts, attr)
            if value is not None:
                fields[f"{prefix}_{stem}_ms"] = value
    return fields


def _load_fields(level: LevelResult) -> dict[str, Any]:
    """The mean requests in flight (Little's law) and the peaks, where measured."""
    fields: dict[str, Any] = {}
    if level.e2e_ms.mean is not None and level.duration_s > 0:
        in_flight = level.e2e_ms.mean * level.completed / 1000.0 / level.duration_s
        fields["concurrency"] = round(in_flight, 4)
    if level.max_output_tokens_per_s is not None:
        fields["max_output_tokens_per_s"] = level.max_output_tokens_per_s
        fields["max_concurrent_requests"] = level.max_concurrent_requests
    return fields


def _goodput_fields(level: LevelResult) -> dict[str, Any]:
    """The SLO's limits, the goodput and the attainment (each limit's too), where judged."""
    good = level.goodput
    if good is None or good.share is None:
        return {}
    slos = {name: ms for name, ms in (("ttft", good.ttft_ms), ("tpot", good.tpot_ms))
            if ms is not None}
    fields = {"goodput_slos_ms": slos, "request_goodput": good.rate_per_s,
              "slo_attainment": good.share}
    if good.by_metric:
        fields["slo_attainment_by_metric"] = good.by_metric
    return fields


def cache_report(cache: CacheFigure) -> dict[str, Any]:
    """sglang's `cache_report` object from the server's cache counters over the level."""
    detailed = bool(set(cache.by_source) & {"device", "host", "storage"})
    return {"total_prompt_tokens": cache.prompt_tokens,
            "total_cached_tokens": cache.cached_tokens,
            "cache_hit_rate_pct": cache.hit_rate_pct if cache.hit_rate_pct is not None else 0.0,
            "device_cached_tokens": cache.by_source.get("device", 0) if detailed else None,
            "host_cached_tokens": cache.by_source.get("host", 0) if detailed else None,
            "storage_cached_tokens": cache.by_source.get("storage") or None,
            "storage_backend": None}


_CSV_SKIPPED = frozenset({"server_info", "input_lens", "output_lens", "ttfts", "itls",
                          "generated_texts", "errors"})


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """A row's scalars, a nested object's as `object.key`; lists and server_info dropped."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if key in _CSV_SKIPPED or isinstance(value, list):
            continue
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": item for inner, item in value.items()
                         if not isinstance(item, dict | list)})
        else:
            flat[key] = value
    return flat


def csv_text(report: BenchReport) -> str:
    """bench_serving.csv: one row per (variant, level), columns in first-seen order; no cell
    a spreadsheet would take for a formula."""
    rows = [_flat(level_row(report, variant, level)) for variant in report.variants
            for level in variant.levels]
    columns = list(dict.fromkeys(key for row in rows for key in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: _as_text(value) for key, value in row.items()} for row in rows)
    return out.getvalue()


def _as_text(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (= + - @, a tab or a carriage return
    first: a variant's name is any text) gets a leading apostrophe, OWASP's CSV-injection rule;
    numbers are left as they are."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


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
    """bench.json, bench.md, bench_serving.jsonl and .csv and each level's requests file, each
    written afresh (never appended); the plots are the view's."""
    return [
        atomic_write_text(out_dir / BENCH_JSON, report.model_dump_json(indent=2) + "\n"),
        atomic_write_text(out_dir / BENCH_MARKDOWN, markdown_table(report)),
        atomic_write_text(out_dir / BENCH_SERVING_JSONL, jsonl(report, output_details)),
        atomic_write_text(out_dir / BENCH_SERVING_CSV, csv_text(report)),
        *write_levels(out_dir, report._requests or []),
    ]
