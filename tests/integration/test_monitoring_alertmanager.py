"""Alerts reach someone: the shipped rules fire in a real Prometheus, go to a real Alertmanager
with opsctl's routing and inhibition, and land at a webhook this test runs (Debian's
`prometheus` 2.42 and `prometheus-alertmanager` 0.25, both on loopback).

The scrape target is a tiny HTTP server this test controls: two variants with requests
running, one still decoding and one whose decode counter stopped, so `SglangDecodeStalled`
must page for the stalled one only. The rules are rendered with `TEST_TIMING` (windows of
seconds) and Alertmanager with its test timing (no group wait); every wait is a poll with a
deadline. `amtool` checks the shipped configuration and its routes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import wait_http_ok
from ruletiming import ALERTMANAGER_TEST_TIMING, TEST_TIMING

from opsctl.config.profiles import load_profile
from opsctl.core.paths import project_root
from opsctl.observe import alertmanager, monitoring
from opsctl.observe.promconfig import ScrapeTargets
from opsctl.observe.promnames import slo_rules

pytestmark = pytest.mark.prometheus

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AMTOOL = shutil.which("amtool")
if PROMETHEUS is None or ALERTMANAGER is None or AMTOOL is None:
    pytest.skip("needs Debian's `prometheus` and `prometheus-alertmanager` (with amtool) "
                "(apt-get install prometheus prometheus-alertmanager)", allow_module_level=True)

SHIPPED = project_root() / "monitoring" / alertmanager.CONFIG_FILE
DEADLINE_SECONDS = 90.0


def _amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(AMTOOL), *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_amtool_accepts_the_shipped_config() -> None:
    result = _amtool("check-config", str(SHIPPED))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 inhibit rules" in result.stdout and "2 receivers" in result.stdout


@pytest.mark.parametrize(("labels", "receiver"), [
    (["alertname=SglangServerDown", "severity=critical"], "critical"),
    (["alertname=SglangKvCacheHigh", "severity=warning"], "warning"),
    (["alertname=Unknown"], "warning"),
])
def test_amtool_routes_by_severity(labels: list[str], receiver: str) -> None:
    result = _amtool("config", "routes", "test", f"--config.file={SHIPPED}", *labels)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


# --- the live chain ------------------------------------------------------------------------


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No request lines in the test output."""


def _fake_sglang() -> ThreadingHTTPServer:
    """/metrics of two variants with 3 requests running: "moving" decodes, "stuck" does not."""
    decoded = [0]

    class Handler(_Quiet):
        def do_GET(self) -> None:
            decoded[0] += 40
            common = 'model_name="glm-5",engine_type="unified",tp_rank="0",pp_rank="0"'
            body = (
                "# TYPE sglang:num_running_reqs gauge\n"
                f'sglang:num_running_reqs{{{common},variant="moving"}} 3.0\n'
                f'sglang:num_running_reqs{{{common},variant="stuck"}} 3.0\n'
                "# TYPE sglang:realtime_tokens_total counter\n"
                f'sglang:realtime_tokens_total{{{common},variant="moving",mode="decode"}} '
                f"{decoded[0]}.0\n"
                f'sglang:realtime_tokens_total{{{common},variant="stuck",mode="decode"}} 120.0\n'
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return _serve(Handler)


def _webhook(received: list[tuple[str, dict[str, Any]]]) -> ThreadingHTTPServer:
    """Records each notification as (path, Alertmanager's JSON)."""

    class Handler(_Quiet):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, json.loads(body)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return _serve(Handler)


def _start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as handle:
        return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT)


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    wait_http_ok(url, process, log, DEADLINE_SECONDS)


def _free_port() -> int:
    with ThreadingHTTPServer(("127.0.0.1", 0), _Quiet) as probe:
        return int(probe.server_address[1])


@dataclass
class Chain:
    prometheus: str
    alertmanager: str
    received: list[tuple[str, dict[str, Any]]]

    def notified(self, accept: Callable[[str, dict[str, str]], bool]
                 ) -> list[tuple[str, dict[str, str]]]:
        """(receiver path, alert labels) of every firing alert received so far that `accept`s."""
        return [(path, alert["labels"]) for path, body in list(self.received)
                for alert in body["alerts"]
                if alert["status"] == "firing" and accept(path, alert["labels"])]

    def wait_for(self, accept: Callable[[str, dict[str, str]], bool]
                 ) -> list[tuple[str, dict[str, str]]]:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not self.notified(accept) and time.monotonic() < deadline:
            time.sleep(0.5)
        return self.notified(accept)


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    root = tmp_path_factory.mktemp("alerting")
    received: list[tuple[str, dict[str, Any]]] = []
    servers = [_fake_sglang(), _webhook(received)]
    target, hook = (f"127.0.0.1:{s.server_address[1]}" for s in servers)
    (root / "receivers.yml").write_text(
        "receivers:\n"
        f"- name: critical\n  webhook_configs: [{{url: 'http://{hook}/critical'}}]\n"
        f"- name: warning\n  webhook_configs: [{{url: 'http://{hook}/warning'}}]\n")
    prom_port, am_port = _free_port(), _free_port()
    nothing = f"127.0.0.1:{_free_port()}"  # the exporter and Pushgateway are not part of this
    targets = ScrapeTargets(sglang=(target,), opsctl_exporter=(nothing,), pushgateway=(nothing,),
                            alertmanager=(f"127.0.0.1:{am_port}",),
                            scrape_interval="1s", evaluation_interval="1s")
    files = monitoring.render_files(
        slo_rules(load_profile("sim")), targets, TEST_TIMING,
        receivers=alertmanager.load_receivers(root / "receivers.yml"),
        alert_timing=ALERTMANAGER_TEST_TIMING)
    monitoring.write_files(files, root)
    processes = [
        _start([str(ALERTMANAGER), f"--config.file={root / alertmanager.CONFIG_FILE}",
                f"--storage.path={root / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
               root / "am.log"),
        _start([str(PROMETHEUS), f"--config.file={root / 'prometheus' / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}"], root / "prom.log"),
    ]
    try:
        _wait_ready(f"http://127.0.0.1:{am_port}/-/ready", processes[0], root / "am.log")
        _wait_ready(f"http://127.0.0.1:{prom_port}/-/ready", processes[1], root / "prom.log")
        yield Chain(f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}", received)
    finally:
        for process in processes:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        for server in servers:
            server.shutdown()


def _is(alertname: str, **labels: str) -> Callable[[str, dict[str, str]], bool]:
    return lambda path, got: got.get("alertname") == alertname and labels.items() <= got.items()


def test_a_stalled_decode_pages_the_critical_receiver(chain: Chain) -> None:
    pages = chain.wait_for(_is("SglangDecodeStalled", variant="stuck"))
    assert pages, f"no page reached the webhook; got {chain.received}"
    assert {path for path, _ in pages} == {"/critical"}
    assert pages[0][1]["severity"] == "critical"
    # The variant that keeps decoding was never even pending in Prometheus, nor notified.
    alerts = httpx.get(f"{chain.prometheus}/api/v1/query", timeout=10, params={
        "query": 'ALERTS{alertname="SglangDecodeStalled"}'}).json()["data"]["result"]
    assert {a["metric"]["variant"] for a in alerts} == {"stuck"}
    assert not chain.notified(_is("SglangDecodeStalled", variant="moving"))


def test_a_down_server_inhibits_its_latency_and_stall_alerts(chain: Chain) -> None:
    down, other = "10.0.0.9:30000", "10.0.0.8:30000"
    alerts = [
        {"alertname": "SglangServerDown", "severity": "critical", "job": "sglang",
         "instance": down},
        {"alertname": "SglangTpotSloFastBurn", "severity": "critical", "slo": "tpot",
         "variant": "v", "instance": down},
        {"alertname": "SglangDecodeStalled", "severity": "critical", "variant": "v",
         "instance": down},
        {"alertname": "SglangTpotSloFastBurn", "severity": "critical", "slo": "tpot",
         "variant": "w", "instance": other},
    ]
    response = httpx.post(f"{chain.alertmanager}/api/v2/alerts", timeout=10,
                          json=[{"labels": labels} for labels in alerts])
    assert response.status_code == 200, response.text
    assert chain.wait_for(_is("SglangServerDown", instance=down))
    assert chain.wait_for(_is("SglangTpotSloFastBurn", instance=other))
    # Alertmanager's own view: the two alerts of the down instance are suppressed by it.
    state = {(a["labels"]["alertname"], a["labels"].get("instance")): a["status"]
             for a in httpx.get(f"{chain.alertmanager}/api/v2/alerts", timeout=10).json()}
    for name in ("SglangTpotSloFastBurn", "SglangDecodeStalled"):
        assert state[(name, down)]["state"] == "suppressed"
        assert state[(name, down)]["inhibitedBy"]
    assert state[("SglangTpotSloFastBurn", other)]["state"] == "active"
    assert not chain.notified(lambda path, got: got.get("instance") == down
                              and got["alertname"] != "SglangServerDown")
