"""opsctl's own metrics: smoke and bench reports as gauges, and their push to a Pushgateway.

Names are `opsctl_*` in base units (seconds, ratios); labels are a small fixed set: profile,
variant, plus `concurrency` for bench levels, `check` for smoke's named checks and `outcome` for
`up --gate` (all bounded).
Every metric lives on an explicit `CollectorRegistry`; nothing is registered at import time.

Two ways out, one mapping (`smoke_families`, `bench_families`, `gate_families`):
- `push_report` sends a smoke or bench report, or a gate outcome, to a Pushgateway (batch jobs
  are not scraped);
- `opsctl exporter` (observe/exporter.py) serves the running deployment's info and the latest
  report files.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import push_to_gateway, pushadd_to_gateway
from prometheus_client.registry import Collector

from opsctl.core.errors import EXIT_SMOKE, OpsctlError

SMOKE_JOB = "opsctl_smoke"
BENCH_JOB = "opsctl_bench"
GATE_JOB = "opsctl_gate"
GATE_OUTCOMES = ("passed", "failed", "interrupted")  # the values of opsctl.gate.gate.Outcome
UNKNOWN = "unknown"
PUSH_TIMEOUT_SECONDS = 10.0
# Bench percentiles pushed per variant and concurrency: report field -> metric stem.
BENCH_LATENCIES = (("ttft_ms", "ttft"), ("itl_ms", "itl"), ("tpot_ms", "tpot"), ("e2e_ms", "e2e"))
BENCH_QUANTILES = ("p50", "p90", "p99")


class MetricsPushError(OpsctlError):
    """The Pushgateway did not take the metrics (callers report it; the verdict stands)."""

    exit_code = EXIT_SMOKE


# --- report -> metric families -----------------------------------------------------------------


def _gauge(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def merge_families(families: Iterable[GaugeMetricFamily]) -> list[Metric]:
    """One family per name, samples appended: the exposition format forbids repeated names."""
    merged: dict[str, GaugeMetricFamily] = {}
    for family in families:
        if family.name in merged:
            merged[family.name].samples.extend(family.samples)
        else:
            merged[family.name] = family
    return list(merged.values())


def _timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def smoke_families(report: dict[str, Any]) -> list[Metric]:
    """SmokeReport (as JSON dict) -> gauges. The last-success timestamp only on success."""
    base = {
        "profile": report.get("profile") or UNKNOWN,
        "variant": report.get("variant") or UNKNOWN,
    }
    passed = bool(report["passed"])
    finished = (_timestamp(report.get("started_at")) or time.time()) + float(report["duration_s"])
    out = [
        _gauge("opsctl_smoke_success", "1 if the last opsctl smoke passed, else 0.", base,
               1.0 if passed else 0.0),
        _gauge("opsctl_smoke_duration_seconds", "Wall time of the last opsctl smoke.", base,
               float(report["duration_s"])),
        _gauge("opsctl_smoke_last_run_timestamp_seconds", "When the last opsctl smoke ended.",
               base, finished),
    ]
    if passed:
        out.append(_gauge(
            "opsctl_smoke_last_success_timestamp_seconds",
            "When the last successful opsctl smoke ended.", base, finished,
        ))
    for check in report.get("checks", []):
        if check["status"] == "skip":
            continue
        out.append(_gauge(
            "opsctl_smoke_check_success", "1 if the named smoke check passed, else 0.",
            {**base, "check": check["name"]}, 1.0 if check["status"] == "pass" else 0.0,
        ))
    # The run's own medians, whatever quantile the profile's SLO states.
    stream = report.get("stream") or {}
    for field, stem in (("tpot_p50_s", "tpot"), ("ttft_p50_s", "ttft")):
        if stream.get(field) is not None:
            out.append(_gauge(
                f"opsctl_smoke_{stem}_p50_seconds", f"Median {stem.upper()} measured by smoke.",
                base, float(stream[field]),
            ))
    return merge_families(out)


def bench_families(report: dict[str, Any], variant: dict[str, Any]) -> list[Metric]:
    """One variant of a BenchReport -> gauges per concurrency level, in seconds and per second."""
    base = {"profile": report.get("profile") or UNKNOWN, "variant": variant["variant"]}
    finished = (_timestamp(report.get("started_at")) or time.time()) + float(report["duration_s"])
    ok = (variant.get("error") is None and int(variant.get("failed_requests", 0)) == 0
          and variant.get("stopped") is None and not report.get("partial"))
    out = [
        _gauge("opsctl_bench_success", "1 if every bench request of the variant succeeded.",
               base, 1.0 if ok else 0.0),
        _gauge("opsctl_bench_last_run_timestamp_seconds", "When the last opsctl bench ended.",
               base, finished),
    ]
    for level in variant.get("levels", []):
        labels = {**base, "concurrency": str(level["concurrency"])}
        out += [
            _gauge("opsctl_bench_output_tokens_per_second", "Output tokens/s at this level.",
                   labels, float(level["output_tokens_per_s"])),
            _gauge("opsctl_bench_requests_per_second", "Completed requests/s at this level.",
                   labels, float(level["requests_per_s"])),
            _gauge("opsctl_bench_requests_failed", "Failed measured requests at this level.",
                   labels, float(level["failed"])),
        ]
        if level.get("input_tokens_per_s") is not None:  # None: no server counted the prompts
            out.append(_gauge("opsctl_bench_input_tokens_per_second",
                              "Prompt tokens/s the server counted at this level.",
                              labels, float(level["input_tokens_per_s"])))
        for field, stem in BENCH_LATENCIES:
            pcts = level.get(field) or {}
            for quantile in BENCH_QUANTILES:
                if pcts.get(quantile) is not None:
                    out.append(_gauge(
                        f"opsctl_bench_{stem}_{quantile}_seconds",
                        f"{stem.upper()} {quantile} measured by opsctl bench.",
                        labels, pcts[quantile] / 1000.0,
                    ))
    return merge_families(out)


def gate_families(record: dict[str, Any]) -> list[Metric]:
    """An `up --gate` outcome ({profile, variant, outcome, finished_at}) -> gauges.

    Every outcome has its series (1 for this run's, 0 for the others), so a query for one
    outcome never finds a stale series; the dashboard's gate annotation reads both gauges.
    """
    base = {
        "profile": record.get("profile") or UNKNOWN,
        "variant": record.get("variant") or UNKNOWN,
    }
    out = [_gauge("opsctl_gate_last_outcome", "1 for the outcome of the last opsctl up --gate "
                  "of the profile, 0 for the others.", {**base, "outcome": outcome},
                  1.0 if record["outcome"] == outcome else 0.0) for outcome in GATE_OUTCOMES]
    out.append(_gauge("opsctl_gate_timestamp_seconds", "When the last opsctl up --gate of the "
                      "profile ended.", base, float(record["finished_at"])))
    return merge_families(out)


class _Families(Collector):
    """A collector over a fixed list of families: what one push sends."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def registry_of(families: list[Metric]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Families(families))
    return registry


# --- Pushgateway ---------------------------------------------------------------------------------


def push_report(kind: str, report: dict[str, Any], gateway_url: str) -> None:
    """Push a smoke or bench report (a report model's JSON dict) or a gate outcome.

    Smoke uses POST (pushadd) so a failed run keeps the previous last-success timestamp in its
    group; bench uses PUT per variant so a rerun replaces that variant's levels entirely; a gate
    uses PUT per profile, so only its last gate's variant and outcome remain.
    """
    try:
        if kind == "smoke":
            grouping = {"profile": report.get("profile") or UNKNOWN,
                        "variant": report.get("variant") or UNKNOWN}
            pushadd_to_gateway(gateway_url, job=SMOKE_JOB, grouping_key=grouping,
                               registry=registry_of(smoke_families(report)),
                               timeout=PUSH_TIMEOUT_SECONDS)
        elif kind == "bench":
            for variant in report.get("variants", []):
                grouping = {"profile": report.get("profile") or UNKNOWN,
                            "variant": variant["variant"]}
                push_to_gateway(gateway_url, job=BENCH_JOB, grouping_key=grouping,
                                registry=registry_of(bench_families(report, variant)),
                                timeout=PUSH_TIMEOUT_SECONDS)
        elif kind == "gate":
            push_to_gateway(gateway_url, job=GATE_JOB,
                            grouping_key={"profile": report.get("profile") or UNKNOWN},
                            registry=registry_of(gate_families(report)),
                            timeout=PUSH_TIMEOUT_SECONDS)
        else:
            raise ValueError(f"unknown report kind {kind!r}")
    except OSError as exc:  # urllib's URLError/HTTPError and socket errors are OSErrors
        raise MetricsPushError(
            f"Pushgateway {gateway_url} refused the {kind} metrics: {exc}",
            hint="check --pushgateway / $OPSCTL_PUSHGATEWAY (e.g. http://127.0.0.1:9091) "
            "and that `opsctl monitor up` is running",
        ) from None
