"""A real Prometheus (Debian's package) scrapes two simulators while opsctl bench runs.

One module-scoped stack: "gathercast" is a fast simulator, "baseline" a slow one (TPOT above
the sim profile's 60 ms SLO, and a tenth of its requests answer 500). Prometheus loads the
shipped rules rendered with `TEST_TIMING` (windows of seconds instead of minutes and hours; the
same expressions otherwise) and scrapes every second; a Pushgateway takes smoke and bench
results. Every wait is a poll with a generous deadline: the tests assert what Prometheus ends
up answering, never how fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import wait_http_ok
from ruletiming import TEST_TIMING

from opsctl.config.profiles import load_profile
from opsctl.config.sloconfig import Objective, Slo
from opsctl.observe import app, dashboard, monitoring
from opsctl.observe.metrics import push_report
from opsctl.observe.promconfig import ScrapeTargets
from opsctl.observe.promnames import slo_rules
from opsctl.observe.report import QUERY_TIMEOUT_SECONDS, with_variant
from opsctl.observe.view import plot_decode_latency
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.settings import BenchSettings, SmokeSettings
from opsctl.traffic.smoke import SmokeOptions, run_smoke

pytestmark = pytest.mark.prometheus

PROMETHEUS = shutil.which("prometheus")
PUSHGATEWAY = shutil.which("prometheus-pushgateway") or shutil.which("pushgateway")
if PROMETHEUS is None or PUSHGATEWAY is None:
    pytest.skip("needs Debian's `prometheus` and `prometheus-pushgateway` binaries "
                "(apt-get install prometheus prometheus-pushgateway)", allow_module_level=True)

SLOS = slo_rules(load_profile("sim"))  # TPOT p50 <= 60 ms, TTFT p50 <= 600 ms: bucket edges
DEADLINE_SECONDS = 90.0
FAST = {"OPSCTL_SIM_TTFT_MS": "20", "OPSCTL_SIM_ITL_MS": "10"}
SLOW = {"OPSCTL_SIM_TTFT_MS": "20", "OPSCTL_SIM_ITL_MS": "150",
        "OPSCTL_SIM_FAULT": "error_rate", "OPSCTL_SIM_ERROR_RATE": "0.1"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    wait_http_ok(url, process, log, DEADLINE_SECONDS)


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as handle:
        return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT)


class _FakeDcgm(BaseHTTPRequestHandler):
    """dcgm-exporter's /metrics for one GPU (names and labels as gpu.py documents them): hot
    (86 C, slowdown at 88 C), throttled for heat, one double-bit ECC error, last Xid 0."""

    def do_GET(self) -> None:
        gpu = ('gpu="0",UUID="GPU-0",pci_bus_id="00000000:01:00.0",device="nvidia0",'
               'modelName="NVIDIA RTX PRO 6000",Hostname="host",DCGM_FI_DRIVER_VERSION="x"')
        lines = [f"DCGM_FI_DEV_GPU_TEMP{{{gpu}}} 86", f"DCGM_FI_DEV_SLOWDOWN_TEMP{{{gpu}}} 88",
                 f"DCGM_FI_DEV_FB_USED{{{gpu}}} 90000", f"DCGM_FI_DEV_FB_FREE{{{gpu}}} 6000",
                 f'DCGM_FI_DEV_XID_ERRORS{{{gpu},err_code="0",err_msg="No Error"}} 0',
                 f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{gpu}}} 1",
                 f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{gpu},clock_event="sw_thermal",'
                 f'window_size_in_ms="300000"}} 2']
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """No request lines in the test output."""


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@dataclass
class Stack:
    prometheus: str
    pushgateway: str
    sims: dict[str, str]  # variant -> base URL
    config_dir: Path
    smoke_reports: dict[str, dict[str, Any]]

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr},
                             timeout=10)
        body = response.json()
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def eventually(self, expr: str, accept: Callable[[list[dict[str, Any]]], bool]
                   ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + DEADLINE_SECONDS
        result = self.query(expr)
        while not accept(result) and time.monotonic() < deadline:
            time.sleep(0.5)
            result = self.query(expr)
        return result


def _abort_one_stream(base_url: str) -> None:
    """Read one chunk of a stream and hang up: sglang counts that request as aborted."""
    body = {"model": "glm-5", "prompt": "abort me", "max_tokens": 64, "stream": True,
            "ignore_eos": True}
    with httpx.stream("POST", f"{base_url}/v1/completions", json=body, timeout=30) as response:
        for _ in response.iter_lines():
            break


def _start_sim(variant: str, env: dict[str, str], root: Path
               ) -> tuple[str, subprocess.Popen[bytes]]:
    """The simulator as the sim profile launches it: served name glm-5, variant label."""
    port = _free_port()
    log = root / f"sim-{variant}.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "opsctl.sim", "--model-path", "/models/GLM-5-NVFP4",
             "--served-model-name", "glm-5", "--host", "127.0.0.1", "--port", str(port),
             "--enable-metrics", "--extra-metric-labels", json.dumps({"variant": variant})],
            env={**os.environ, **env}, stdout=handle, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    _wait_http(f"{url}/health_generate", process, log)
    return url, process


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("monitoring")
    processes: list[subprocess.Popen[bytes]] = []
    sims: dict[str, str] = {}
    try:
        for variant, env in (("gathercast", FAST), ("baseline", SLOW)):
            url, process = _start_sim(variant, env, root)
            processes.append(process)
            sims[variant] = url
    except BaseException:
        for process in processes:
            _stop(process)
        raise
    prom_port, push_port = _free_port(), _free_port()
    dcgm = ThreadingHTTPServer(("127.0.0.1", 0), _FakeDcgm)
    threading.Thread(target=dcgm.serve_forever, daemon=True).start()
    targets = ScrapeTargets(
        sglang=tuple(url.removeprefix("http://") for url in sims.values()),
        opsctl_exporter=(f"127.0.0.1:{_free_port()}",),  # nothing listens: up == 0, harmless
        pushgateway=(f"127.0.0.1:{push_port}",),
        alertmanager=(f"127.0.0.1:{_free_port()}",),  # test_monitoring_alertmanager.py has one
        dcgm_exporter=(f"127.0.0.1:{dcgm.server_address[1]}",),
        scrape_interval="1s", evaluation_interval="1s",
    )
    files = monitoring.render_files(SLOS, targets, TEST_TIMING)
    monitoring.write_files(files, root)
    processes += [
        # Debian's build persists to /var/lib/prometheus/pushgateway.data by default: a
        # private file keeps runs (and other users of that default) apart.
        _start([PUSHGATEWAY, f"--web.listen-address=127.0.0.1:{push_port}",
                f"--persistence.file={root / 'pushgateway.data'}"], root / "push.log"),
        _start([PROMETHEUS, f"--config.file={root / 'prometheus' / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}"], root / "prom.log"),
    ]
    try:
        pushgateway = f"http://127.0.0.1:{push_port}"
        prometheus = f"http://127.0.0.1:{prom_port}"
        _wait_http(f"{pushgateway}/-/ready", processes[-2], root / "push.log")
        _wait_http(f"{prometheus}/-/ready", processes[-1], root / "prom.log")

        # Load while Prometheus scrapes: a real bench sweep of both variants, one aborted
        # stream each, then smoke against both (pushed like `opsctl smoke --pushgateway`).
        for url in sims.values():
            _abort_one_stream(url)
        bench = run_bench(
            [Target("gathercast", sims["gathercast"]), Target("baseline", sims["baseline"])],
            BenchOptions(BenchSettings(concurrency=(1, 4), requests_per_level=8, input_words=16,
                                       output_tokens=16, request_timeout_s=60)),
            profile_name="sim",
        )
        push_report("bench", bench.model_dump(mode="json"), pushgateway)
        smoke_reports = {}
        for variant, url in sims.items():
            report = run_smoke(SmokeOptions(base_url=url, profile="sim", variant=variant,
                                            slo=Slo(tpot=Objective(quantile=0.5, threshold_ms=60)),
                                            settings=SmokeSettings(overall_timeout_s=120)))
            smoke_reports[variant] = report.model_dump(mode="json")
            push_report("smoke", smoke_reports[variant], pushgateway)
        yield Stack(prometheus, pushgateway, sims, root, smoke_reports)
    finally:
        for process in processes:
            _stop(process)
        dcgm.shutdown()


def _keep_load(stack: Stack, stop: threading.Event) -> threading.Thread:
    """A small steady stream of requests so that rate() windows keep seeing traffic."""

    def loop() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                for url in stack.sims.values():
                    with contextlib.suppress(httpx.HTTPError):
                        client.post(f"{url}/v1/completions", json={
                            "model": "glm-5", "prompt": "keep going", "max_tokens": 8})

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def steady_load(stack: Stack) -> Iterator[None]:
    stop = threading.Event()
    thread = _keep_load(stack, stop)
    yield
    stop.set()
    thread.join(timeout=60)


def _variants(result: list[dict[str, Any]]) -> set[str]:
    return {item["metric"].get("variant", "") for item in result}


def test_prometheus_scrapes_both_simulators(stack: Stack) -> None:
    result = stack.eventually('up{job="sglang"} == 1', lambda r: len(r) == 2)
    assert len(result) == 2


def test_every_recording_rule_evaluates_to_data(stack: Stack, steady_load: None) -> None:
    rules = yaml.safe_load((stack.config_dir / "prometheus/rules/sglang-recording.yml").read_text())
    records = [rule["record"] for group in rules["groups"] for rule in group["rules"]]
    assert len(records) >= 15
    empty = []
    for record in records:
        result = stack.eventually(record, lambda r: bool(r))
        if not result:
            empty.append(record)
    assert empty == []
    # Both variants are split by label in the latency records.
    assert _variants(stack.query("variant:sglang_tpot_seconds:p50_rate5m")) == {
        "gathercast", "baseline"}


def test_every_dashboard_panel_query_returns_data(stack: Stack, steady_load: None) -> None:
    queries = dashboard.panel_queries()
    assert len(queries) >= 15
    empty = []
    for title, expr in queries:
        result = stack.eventually(with_variant(expr, ".*"), lambda r: bool(r))
        if not result:
            empty.append((title, expr))
    assert empty == []


def test_slow_variant_fires_the_tpot_alert_and_fast_stays_quiet(
    stack: Stack, steady_load: None
) -> None:
    firing = 'ALERTS{alertname="SglangTpotSloFastBurn", alertstate="firing"}'
    result = stack.eventually(firing, lambda r: "baseline" in _variants(r))
    assert "baseline" in _variants(result)
    # The fast variant has had the same windows of traffic: it must not even be pending.
    assert "gathercast" not in _variants(stack.query('ALERTS{alertname="SglangTpotSloFastBurn"}'))


def test_request_errors_alert_fires_for_the_failing_simulator(
    stack: Stack, steady_load: None
) -> None:
    firing = 'ALERTS{alertname="SglangRequestErrors", alertstate="firing"}'
    baseline = stack.sims["baseline"].removeprefix("http://")
    result = stack.eventually(
        firing, lambda r: any(i["metric"].get("instance") == baseline for i in r))
    instances = {item["metric"].get("instance") for item in result}
    assert baseline in instances
    assert stack.sims["gathercast"].removeprefix("http://") not in instances


def test_smoke_metrics_pushed_by_smoke_are_queryable(stack: Stack) -> None:
    assert stack.smoke_reports["gathercast"]["passed"] is True
    assert stack.smoke_reports["baseline"]["passed"] is False  # over the TPOT SLO
    success = stack.eventually("opsctl_smoke_success", lambda r: len(r) == 2)
    by_variant = {item["metric"]["variant"]: float(item["value"][1]) for item in success}
    assert by_variant == {"gathercast": 1.0, "baseline": 0.0}
    assert {item["metric"]["job"] for item in success} == {"opsctl_smoke"}
    last = stack.eventually("opsctl_smoke_last_success_timestamp_seconds", lambda r: bool(r))
    assert _variants(last) == {"gathercast"}
    failing = stack.eventually('ALERTS{alertname="OpsctlSmokeFailing", alertstate="firing"}',
                               lambda r: bool(r))
    assert _variants(failing) == {"baseline"}


def test_bench_metrics_are_queryable_per_variant_and_concurrency(stack: Stack) -> None:
    result = stack.eventually("opsctl_bench_tpot_p50_seconds", lambda r: len(r) == 4)
    levels = {(i["metric"]["variant"], i["metric"]["concurrency"]) for i in result}
    assert levels == {("gathercast", "1"), ("gathercast", "4"), ("baseline", "1"),
                      ("baseline", "4")}


def test_report_renders_a_png_from_prometheus(stack: Stack, steady_load: None,
                                              tmp_path: Path) -> None:
    stack.eventually("variant:sglang_tpot_seconds:p50_rate5m", lambda r: len(r) == 2)
    with httpx.Client(base_url=stack.prometheus, timeout=QUERY_TIMEOUT_SECONDS) as client:
        result = app.report(client, tmp_path / "decode.png", plot=plot_decode_latency,
                            since_seconds=120, step=1)
    assert result.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_hot_throttled_gpu_fires_the_gpu_alerts(stack: Stack) -> None:
    firing = 'ALERTS{alertstate="firing", alertname=~"Gpu.*"}'
    result = stack.eventually(firing, lambda r: len(r) >= 2)
    assert {item["metric"]["alertname"] for item in result} == {
        "GpuTemperatureHigh", "GpuClockThrottled"}
    assert {item["metric"]["gpu"] for item in result} == {"0"}
