"""--pushgateway: smoke and bench hand their report's JSON to metrics.push_report."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SimServer
from rich.console import Console

from opsctl.observe import metrics
from opsctl.traffic.bench import bench_command
from opsctl.traffic.smoke import smoke_command

StartSim = Callable[..., SimServer]
KEY = "sk-push-sentinel-key-5150"


def _sim(start: StartSim) -> str:
    return start(env={"OPSCTL_SIM_ITL_MS": "2", "OPSCTL_SIM_TTFT_MS": "5"},
                 args=["--served-model-name", "glm-5", "--enable-metrics", "--api-key", KEY]).url


def _smoke(url: str, tmp_path: Path, gateway: str, console: Console) -> None:
    smoke_command(profile=None, variant=None, base_url=url, model=None, api="completions",
                  json_path=tmp_path / "smoke.json", compare_with=None, request_timeout_s=10,
                  overall_timeout_s=60, pushgateway=gateway, console=console)


def test_reports_are_pushed_with_the_key_masked(
    sim_server: StartSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pushed: list[tuple[str, dict[str, Any], str]] = []
    monkeypatch.setattr(metrics, "push_report", lambda k, r, g: pushed.append((k, r, g)))
    monkeypatch.setenv("OPSCTL_API_KEY", KEY)
    url = _sim(sim_server)
    console = Console(record=True, width=200)
    _smoke(url, tmp_path, "http://gateway:9091", console)
    bench_command(profile=None, variants=None, base_urls=[url], concurrency="1",
                  requests_per_level=2, input_words=8, output_tokens=4, model=None,
                  api="completions", request_timeout_s=10, out_dir=tmp_path / "bench",
                  pushgateway="http://gateway:9091", console=console)
    assert [(kind, gateway) for kind, _, gateway in pushed] == [
        ("smoke", "http://gateway:9091"), ("bench", "http://gateway:9091")]
    assert pushed[0][1]["passed"] is True and pushed[0][1]["kind"] == "smoke"
    assert pushed[1][1]["kind"] == "bench"
    assert all(report["api_key"] == "****5150" for _, report, _ in pushed)
    assert KEY not in repr(pushed) + console.export_text()


def test_a_failed_push_warns_but_keeps_the_verdict(
    sim_server: StartSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPSCTL_API_KEY", KEY)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    console = Console(record=True, width=200)
    _smoke(_sim(sim_server), tmp_path, f"http://127.0.0.1:{port}", console)  # no exception
    text = console.export_text()
    assert f"push to http://127.0.0.1:{port} failed" in text and "smoke PASS" in text
