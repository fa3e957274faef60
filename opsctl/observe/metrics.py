"""opsctl's own metrics: smoke and bench results, and the running deployment's identity.

Names are `opsctl_*` in base units (seconds, ratios); labels are a small fixed set: profile,
variant, plus `concurrency` for bench levels and `check` for smoke's named checks (both bounded).
Every metric lives on an explicit `CollectorRegistry`; nothing is registered at import time.

Two ways out, one mapping (`report_families`):
- `push_report` sends a smoke or bench report to a Pushgateway (batch jobs are not scraped);
- `opsctl exporter` serves the running deployment's info and the latest report files.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import push_to_gateway, pushadd_to_gateway
from prometheus_client.registry import Collector

from opsctl.core.errors import EXIT_SMOKE, OpsctlError, UsageError

SMOKE_JOB = "opsctl_smoke"
BENCH_JOB = "opsctl_bench"
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


def _merge(families: Iterable[GaugeMetricFamily]) -> list[Metric]:
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
    base = {"profile": report.get("profile") or UNKNOWN, "variant": report.get("variant") or UNKNOWN}
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
    slo = report.get("slo") or {}
    for field, stem in (("tpot_p50_ms", "tpot"), ("ttft_p50_ms", "ttft")):
        if slo.get(field) is not None:
            out.append(_gauge(
                f"opsctl_smoke_{stem}_p50_seconds", f"Median {stem.upper()} measured by smoke.",
                base, slo[field] / 1000.0,
            ))
    return _merge(out)


def bench_families(report: dict[str, Any], variant: dict[str, Any]) -> list[Metric]:
    """One variant of a BenchReport -> gauges per concurrency level, in seconds and per second."""
    base = {"profile": report.get("profile") or UNKNOWN, "variant": variant["variant"]}
    finished = (_timestamp(report.get("started_at")) or time.time()) + float(report["duration_s"])
    ok = variant.get("error") is None and int(variant.get("failed_requests", 0)) == 0
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
        for field, stem in BENCH_LATENCIES:
            pcts = level.get(field) or {}
            for quantile in BENCH_QUANTILES:
                if pcts.get(quantile) is not None:
                    out.append(_gauge(
                        f"opsctl_bench_{stem}_{quantile}_seconds",
                        f"{stem.upper()} {quantile} measured by opsctl bench.",
                        labels, pcts[quantile] / 1000.0,
                    ))
    return _merge(out)


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
    """Push a smoke or bench report (a report model's JSON dict) to a Pushgateway.

    Smoke uses POST (pushadd) so a failed run keeps the previous last-success timestamp in its
    group; bench uses PUT per variant so a rerun replaces that variant's levels entirely.
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
        else:
            raise ValueError(f"unknown report kind {kind!r}")
    except OSError as exc:  # urllib's URLError/HTTPError and socket errors are OSErrors
        raise MetricsPushError(
            f"Pushgateway {gateway_url} refused the {kind} metrics: {exc}",
            hint="check --pushgateway / $OPSCTL_PUSHGATEWAY (e.g. http://127.0.0.1:9091) "
            "and that `opsctl monitor up` is running",
        ) from None


# --- exporter ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeploymentInfo:
    """What is running: read from the container's opsctl.* labels, or from a profile."""

    profile: str
    variant: str
    image: str
    sglang_version: str
    patch_sha256: str

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> DeploymentInfo:
        return cls(
            profile=labels.get("opsctl.profile", UNKNOWN),
            variant=labels.get("opsctl.variant", UNKNOWN),
            image=labels.get("opsctl.image", UNKNOWN),
            sglang_version=labels.get("opsctl.sglang-version", UNKNOWN),
            patch_sha256=labels.get("opsctl.patch-sha256", "none"),
        )


InfoSource = Callable[[], list[DeploymentInfo]]


def static_source(profile: str | None, variant: str | None, image: str | None) -> InfoSource:
    """Info from a profile and variant (no Docker): for a deployment opsctl did not start."""
    from opsctl.deploy.profiles import load_profile
    from opsctl.image import patchset

    deployment = load_profile(profile).resolve(variant)
    version = deployment.profile.image.sglang_version
    info = DeploymentInfo(
        profile=deployment.profile.name,
        variant=deployment.variant,
        image=image or deployment.profile.image.repository,
        sglang_version=version,
        patch_sha256=patchset.patch_set_sha256(version) if deployment.patched else "none",
    )
    return lambda: [info]


def docker_source(profile: str | None) -> InfoSource:
    """Info from the labels of the running opsctl server containers, asked at every scrape."""

    def running() -> list[DeploymentInfo]:
        from opsctl.deploy.launch import find_servers
        from opsctl.engine.dockerpy import Engine

        engine = Engine.connect()
        return [DeploymentInfo.from_labels(c.labels) for c in find_servers(engine, profile)
                if c.status == "running"]

    return running




class DeploymentCollector(Collector):
    """opsctl_deployment_info for what runs now, asked of `source` at every scrape."""

    def __init__(self, source: InfoSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "opsctl_deployment_info",
            "The running opsctl deployment (always 1); its labels say what runs.",
            labels=["profile", "variant", "image", "sglang_version", "patch_sha256"],
        )
        up = GaugeMetricFamily(
            "opsctl_deployment_lookup_success",
            "1 if the exporter could ask Docker what runs, else 0.", labels=[],
        )
        try:
            running = self._source()
        except OpsctlError:
            up.add_metric([], 0.0)
            yield up
            return
        for item in running:
            info.add_metric([item.profile, item.variant, item.image, item.sglang_version,
                             item.patch_sha256], 1.0)
        up.add_metric([], 1.0)
        yield info
        yield up


class ReportFileCollector(Collector):
    """The newest smoke and bench report files under a folder, read at every scrape."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    def _newest(self, pattern: str) -> dict[str, Any] | None:
        files = sorted(self._folder.glob(pattern), key=lambda p: p.stat().st_mtime)
        for path in reversed(files):
            try:
                return json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a half-written or foreign file: the next newest one still counts
        return None

    def collect(self) -> Iterator[Metric]:
        smoke = self._newest("smoke-*.json")
        families: list[Metric] = []
        if smoke is not None:
            families += smoke_families(smoke)
        bench = self._newest("bench-*/bench.json")  # bench writes out/bench-<stamp>/bench.json
        if bench is not None and bench.get("kind") == "bench":
            for variant in bench.get("variants", []):
                families += bench_families(bench, variant)
        yield from _merge(families)  # type: ignore[arg-type]


def exporter_registry(source: InfoSource, reports: Path | None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(DeploymentCollector(source))
    if reports is not None:
        registry.register(ReportFileCollector(reports))
    return registry


def start(registry: CollectorRegistry, address: str, port: int) -> tuple[Any, threading.Thread]:
    """Serve /metrics from a background thread; call `.shutdown()` on the server to stop."""
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        raise UsageError(f"cannot listen on {address}:{port}: {exc.strerror}",
                         hint="pick another --port or stop what uses it") from None
    return server, thread


def serve(registry: CollectorRegistry, address: str, port: int) -> None:
    """Serve /metrics until interrupted."""
    server, thread = start(registry, address, port)
    try:
        while thread.is_alive():
            thread.join(timeout=1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
