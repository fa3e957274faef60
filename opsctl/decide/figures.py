"""A variant's levels pooled over its repeats, from each repeat's bench report and per-request
records (opsctl.traffic.bench.records), with bootstrap 95% intervals (opsctl.decide.bootstrap)
and SLO goodput under the profile's SLO.

Only the figures the ranking reads are kept from a record (ok, TTFT, TPOT, E2E, output tokens):
the gaps are dropped as each file is read, so pooling many levels stays small in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsctl.config.sloconfig import Slo, check
from opsctl.decide import bootstrap
from opsctl.decide.bootstrap import Repeat
from opsctl.decide.report import Level, RunRecord, VariantRecord
from opsctl.traffic.bench.records import load_report, read_records
from opsctl.traffic.bench.report import LevelResult
from opsctl.traffic.bench.stats import percentile

_KEPT = ("ok", "ttft_s", "tpot_s", "e2e_s", "output_tokens")


@dataclass
class Pooled:
    """One concurrency's repeats: their records and bench levels, in the order they ran."""

    concurrency: int
    repeats: list[Repeat] = field(default_factory=list)
    levels: list[LevelResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# (variant, concurrency) -> its repeats; what the verdict compares variants with.
Samples = dict[tuple[str, int], list[Repeat]]


def run_level(level: LevelResult) -> Level:
    """A bench level as one repeat's figures."""
    accept = level.server.spec_accept_length if level.server else None
    return Level(concurrency=level.concurrency, tpot_p50_ms=level.tpot_ms.p50,
                 tpot_p90_ms=level.tpot_ms.p90,
                 output_tokens_per_s=level.output_tokens_per_s if level.completed else None,
                 input_tokens_per_s=level.input_tokens_per_s if level.completed else None,
                 failures=level.failed + level.warmup_failed, aborted=level.aborted,
                 accept_length=round(accept.mean, 3) if accept else None,
                 requests=level.requests, note=level.requests_note)


def _slim(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: record.get(key) for key in _KEPT} for record in records]


def gather(record: VariantRecord, out: Path) -> list[Pooled]:
    """Every repeat's levels of `record`, read back from the run directory, by concurrency in
    sweep order."""
    pooled: dict[int, Pooled] = {}
    for run in record.runs:
        if run.bench_report is None:
            continue
        directory = (out / run.bench_report).parent
        report = load_report(directory)
        for level in report.variants[0].levels if report.variants else []:
            entry = pooled.setdefault(level.concurrency, Pooled(level.concurrency))
            entry.levels.append(level)
            records: list[dict[str, Any]] = []
            if level.requests_file is None:
                entry.notes.append(f"repeat {run.repeat}: no requests file")
            else:
                records = _slim(read_records(directory / level.requests_file))
            if level.requests_note:
                entry.notes.append(f"repeat {run.repeat}: {level.requests_note}")
            entry.repeats.append(Repeat(records, level.duration_s, level.concurrency))
    return list(pooled.values())


def _values(repeats: list[Repeat], key: str) -> list[float]:
    return [float(value) for repeat in repeats for r in repeat.records
            if r.get("ok") and isinstance(value := r.get(key), int | float)]


def _meets(slo: Slo, repeats: list[Repeat]) -> bool | None:
    stated = [(objective, key) for objective, key in ((slo.ttft, "ttft_s"), (slo.tpot, "tpot_s"))
              if objective is not None]
    if not stated:
        return None
    results = [check(objective, _values(repeats, key)).passed for objective, key in stated]
    return None if any(result is None for result in results) else all(results)


def _mean(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return sum(found) / len(found) if found else None


def _rounded(interval: tuple[float, float] | None, digits: int) -> tuple[float, float] | None:
    return None if interval is None else (round(interval[0], digits), round(interval[1], digits))


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def pool(entry: Pooled, slo: Slo | None) -> Level:
    """The pooled level: failures summed, figures from every repeat's records, intervals."""
    throughput = _mean([lv.output_tokens_per_s if lv.completed else None for lv in entry.levels])
    inputs = _mean([run_level(lv).input_tokens_per_s for lv in entry.levels])
    level = Level(
        concurrency=entry.concurrency,
        **_tpot_percentiles(entry),
        output_tokens_per_s=_round(throughput, 3),
        input_tokens_per_s=_round(inputs, 3),
        failures=sum(lv.failed + lv.warmup_failed for lv in entry.levels),
        aborted=next((lv.aborted for lv in entry.levels if lv.aborted), None),
        accept_length=_mean([run_level(lv).accept_length for lv in entry.levels]),
        repeats=len(entry.levels), requests=sum(len(r.records) for r in entry.repeats),
        tpot_p50_ci_ms=_rounded(bootstrap.interval(entry.repeats, bootstrap.tpot_p50), 4),
        output_tokens_per_s_ci=_throughput_interval(entry, throughput),
        note="; ".join(entry.notes) or None,
    )
    if slo is not None and (slo.ttft is not None or slo.tpot is not None):
        _judge(level, entry, slo)
    return level


def _tpot_percentiles(entry: Pooled) -> dict[str, float | None]:
    """TPOT p50 and p90 over every repeat's records; the first repeat's where none has one."""
    tpots = _values(entry.repeats, "tpot_s")
    if not tpots:
        first = run_level(entry.levels[0])
        return {"tpot_p50_ms": first.tpot_p50_ms, "tpot_p90_ms": first.tpot_p90_ms}
    return {"tpot_p50_ms": round(percentile(tpots, 50) * 1000, 4),
            "tpot_p90_ms": round(percentile(tpots, 90) * 1000, 4)}


def _throughput_interval(entry: Pooled, throughput: float | None) -> tuple[float, float] | None:
    if throughput is None:
        return None
    return _rounded(
        bootstrap.scaled_interval(entry.repeats, bootstrap.little_throughput, throughput), 3)


def _judge(level: Level, entry: Pooled, slo: Slo) -> None:
    """The level's goodput under `slo`, its interval, and whether the level meets it."""
    rate = bootstrap.goodput_rate(slo)
    whole = rate([(r, r.records) for r in entry.repeats])
    level.goodput_per_s = _round(whole, 4)
    level.goodput_ci = _rounded(bootstrap.interval(entry.repeats, rate), 4)
    level.meets_slo = _meets(slo, entry.repeats)


def pool_variant(record: VariantRecord, out: Path, slo: Slo | None, samples: Samples) -> None:
    """Fill `record.levels` from its runs (and `samples` with their repeats)."""
    entries = gather(record, out)
    record.levels = [pool(entry, slo) for entry in entries]
    for entry in entries:
        samples[(record.variant, entry.concurrency)] = entry.repeats


def new_run(repeat: int, bench_report: str | None, levels: list[LevelResult],
            note: str | None) -> RunRecord:
    return RunRecord(repeat=repeat, bench_report=bench_report,
                     levels=[run_level(level) for level in levels], note=note)
