"""opsctl's own metrics: report -> gauges in base units, push errors, the exporter's collectors."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from prometheus_client import generate_latest

from opsctl.config.profiles import load_profile
from opsctl.core.errors import OpsctlError
from opsctl.observe.exporter import (
    DeploymentCollector,
    DeploymentInfo,
    ReportFileCollector,
    exporter_registry,
    running_source,
    start,
    static_source,
)
from opsctl.observe.metrics import (
    MetricsPushError,
    bench_families,
    push_report,
    registry_of,
    smoke_families,
)

SMOKE_BASE = {"profile": "sim", "variant": "gathercast"}


def _smoke(passed: bool) -> dict[str, Any]:
    return {
        "kind": "smoke", "started_at": "2026-11-29T12:00:00+00:00", "duration_s": 4.5,
        "profile": "sim", "variant": "gathercast", "passed": passed,
        "checks": [
            {"name": "readiness", "status": "pass"},
            {"name": "slo", "status": "pass" if passed else "fail"},
            {"name": "compare", "status": "skip"},
        ],
        "stream": {"tpot_p50_s": 0.025, "ttft_p50_s": 0.080},
        "slo": {"tpot": {"quantile": 0.9, "threshold_ms": 60.0, "observed_ms": 31.0}},
    }


def _bench() -> dict[str, Any]:
    level = {"concurrency": 4, "failed": 1, "output_tokens_per_s": 900.0, "requests_per_s": 3.0,
             "tpot_ms": {"p50": 30.0, "p90": 35.0, "p99": None},
             "ttft_ms": {"p50": 100.0}, "itl_ms": {}, "e2e_ms": {}}
    return {"kind": "bench", "started_at": "2026-11-29T12:00:00+00:00", "duration_s": 60.0,
            "profile": "sim",
            "variants": [{"variant": "baseline", "levels": [level], "failed_requests": 1}]}


def test_passing_smoke_sets_success_and_last_success_in_seconds() -> None:
    registry = registry_of(smoke_families(_smoke(passed=True)))
    assert registry.get_sample_value("opsctl_smoke_success", SMOKE_BASE) == 1.0
    assert registry.get_sample_value("opsctl_smoke_duration_seconds", SMOKE_BASE) == 4.5
    end = registry.get_sample_value("opsctl_smoke_last_success_timestamp_seconds", SMOKE_BASE)
    assert end == pytest.approx(1795953600.0 + 4.5)  # 2026-11-29T12:00:00Z + duration
    assert registry.get_sample_value("opsctl_smoke_tpot_p50_seconds", SMOKE_BASE) == 0.025


def test_failing_smoke_has_no_last_success_so_a_push_keeps_the_previous_one() -> None:
    registry = registry_of(smoke_families(_smoke(passed=False)))
    assert registry.get_sample_value("opsctl_smoke_success", SMOKE_BASE) == 0.0
    assert registry.get_sample_value(
        "opsctl_smoke_last_success_timestamp_seconds", SMOKE_BASE) is None
    assert registry.get_sample_value(
        "opsctl_smoke_check_success", {**SMOKE_BASE, "check": "slo"}) == 0.0
    # A skipped check is not reported as a failure.
    assert registry.get_sample_value(
        "opsctl_smoke_check_success", {**SMOKE_BASE, "check": "compare"}) is None


def test_bench_levels_are_labelled_by_variant_and_concurrency_in_base_units() -> None:
    report = _bench()
    registry = registry_of(bench_families(report, report["variants"][0]))
    labels = {"profile": "sim", "variant": "baseline", "concurrency": "4"}
    assert registry.get_sample_value("opsctl_bench_tpot_p50_seconds", labels) == 0.03
    assert registry.get_sample_value("opsctl_bench_ttft_p50_seconds", labels) == 0.1
    assert registry.get_sample_value("opsctl_bench_tpot_p99_seconds", labels) is None
    assert registry.get_sample_value("opsctl_bench_output_tokens_per_second", labels) == 900.0
    assert registry.get_sample_value(
        "opsctl_bench_success", {"profile": "sim", "variant": "baseline"}) == 0.0
    # No prompt tokens counted by the server: no input rate, rather than a zero.
    assert registry.get_sample_value("opsctl_bench_input_tokens_per_second", labels) is None


def test_bench_input_tokens_per_second_reaches_the_push_when_counted() -> None:
    report = _bench()
    report["variants"][0]["levels"][0]["input_tokens_per_s"] = 4200.5
    registry = registry_of(bench_families(report, report["variants"][0]))
    labels = {"profile": "sim", "variant": "baseline", "concurrency": "4"}
    assert registry.get_sample_value("opsctl_bench_input_tokens_per_second", labels) == 4200.5


def test_every_opsctl_metric_name_is_prefixed_and_in_base_units() -> None:
    report = _bench()
    families = smoke_families(_smoke(True)) + bench_families(report, report["variants"][0])
    for family in families:
        assert family.name.startswith("opsctl_")
        assert not family.name.endswith(("_ms", "_milliseconds"))
        for sample in family.samples:
            assert set(sample.labels) <= {"profile", "variant", "concurrency", "check"}


def test_push_to_an_unreachable_gateway_is_a_user_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(MetricsPushError) as raised:
        push_report("smoke", _smoke(True), f"http://127.0.0.1:{port}")
    assert isinstance(raised.value, OpsctlError)
    assert "OPSCTL_PUSHGATEWAY" in raised.value.hint


def test_deployment_info_comes_from_container_labels() -> None:
    labels = {
        "opsctl.profile": "glm5-nvfp4-rtx6000", "opsctl.variant": "gathercast",
        "opsctl.image": "opsctl/sglang:abc", "opsctl.sglang-version": "0.5.23",
        "opsctl.patch-sha256": "f00d"}
    registry = exporter_registry(running_source(lambda: [labels]), reports=None)
    assert registry.get_sample_value("opsctl_deployment_info", {
        "profile": "glm5-nvfp4-rtx6000", "variant": "gathercast", "image": "opsctl/sglang:abc",
        "sglang_version": "0.5.23", "patch_sha256": "f00d"}) == 1.0
    assert registry.get_sample_value("opsctl_deployment_lookup_success") == 1.0


def test_a_failed_docker_lookup_is_reported_not_raised() -> None:
    def unreachable() -> list[DeploymentInfo]:
        raise OpsctlError("Docker daemon unreachable")

    registry = exporter_registry(unreachable, reports=None)
    assert registry.get_sample_value("opsctl_deployment_lookup_success") == 0.0
    assert b"opsctl_deployment_info{" not in generate_latest(registry)


def test_exporter_serves_the_newest_report_files(tmp_path: Any) -> None:
    import json
    import os

    old, new = tmp_path / "smoke-1.json", tmp_path / "smoke-2.json"
    old.write_text(json.dumps(_smoke(passed=True)))
    new.write_text(json.dumps(_smoke(passed=False)))
    os.utime(old, (1, 1))
    (tmp_path / "bench-x").mkdir()
    (tmp_path / "bench-x" / "bench.json").write_text(json.dumps(_bench()))
    registry = registry_of(list(ReportFileCollector(tmp_path).collect()))
    assert registry.get_sample_value("opsctl_smoke_success", SMOKE_BASE) == 0.0
    assert registry.get_sample_value("opsctl_bench_requests_failed", {
        "profile": "sim", "variant": "baseline", "concurrency": "4"}) == 1.0


def test_deployment_collector_yields_one_family_per_name() -> None:
    info = DeploymentInfo("p", "a", "img", "0.5.23", "none")
    other = DeploymentInfo("p", "b", "img", "0.5.23", "none")
    names = [f.name for f in DeploymentCollector(lambda: [info, other]).collect()]
    assert names.count("opsctl_deployment_info") == 1


def test_exporter_describes_a_profile_variant_without_docker() -> None:
    from opsctl.image import patchset

    sim = load_profile("sim")
    digest = patchset.patch_set_sha256("0.5.23")
    registry = exporter_registry(
        static_source(sim.resolve("gathercast"), "opsctl/sim:test", digest), None)
    labels = {"profile": "sim", "variant": "gathercast", "image": "opsctl/sim:test",
              "sglang_version": "0.5.23", "patch_sha256": digest}
    assert registry.get_sample_value("opsctl_deployment_info", labels) == 1.0
    unpatched = exporter_registry(static_source(sim.resolve("baseline"), None, "none"), None)
    assert unpatched.get_sample_value("opsctl_deployment_info", {
        **labels, "variant": "baseline", "image": "opsctl/sim", "patch_sha256": "none"}) == 1.0


def test_exporter_serves_metrics_over_http_on_loopback() -> None:
    import httpx

    info = DeploymentInfo("sim", "gathercast", "opsctl/sim:x", "0.5.23", "none")
    server, thread = start(exporter_registry(lambda: [info], None), "127.0.0.1", 0)
    try:
        port = server.server_port
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert 'opsctl_deployment_info{image="opsctl/sim:x"' in body
    assert "opsctl_deployment_lookup_success 1.0" in body


def test_exporter_port_in_use_is_a_usage_error() -> None:
    from opsctl.core.errors import UsageError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(UsageError, match="cannot listen"):
            start(exporter_registry(lambda: [], None), "127.0.0.1", sock.getsockname()[1])


def test_running_servers_are_asked_at_every_scrape() -> None:
    asked: list[int] = []

    def running() -> list[dict[str, str]]:
        asked.append(1)
        return [{"opsctl.variant": f"v{len(asked)}"}]

    registry = exporter_registry(running_source(running), None)  # registering asks once too
    before = len(asked)
    first, second = generate_latest(registry), generate_latest(registry)
    assert len(asked) == before + 2
    assert f'variant="v{before + 1}"'.encode() in first
    assert f'variant="v{before + 2}"'.encode() in second
