"""--pushgateway: smoke and bench hand their report's JSON to the push collaborator.

The traffic app gets the push as an argument (the CLI passes observe's `push_report`), so a
recording stand-in sees exactly what would be pushed; the CLI test pushes to a closed port.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import OpsctlRunner, SimServer
from rich.console import Console

from opsctl.config.profiles import Profile
from opsctl.core.errors import OpsctlError
from opsctl.observe.metrics import bench_families
from opsctl.traffic import app, view
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.sweep import Launcher
from opsctl.traffic.client import make_client
from opsctl.traffic.evals.dataset import load_gsm8k
from opsctl.traffic.settings import BenchSettings, SmokeSettings
from opsctl.traffic.smoke import SmokeOptions
from opsctl.traffic.smoke_evals import EvalRequest

StartSim = Callable[..., SimServer]
KEY = "sk-push-sentinel-key-5150"
GATEWAY = "http://gateway:9091"


def _sim(start: StartSim) -> str:
    return start(env={"OPSCTL_SIM_ITL_MS": "2", "OPSCTL_SIM_TTFT_MS": "5"},
                 args=["--served-model-name", "glm-5", "--enable-metrics", "--api-key", KEY]).url


def _smoke_request(url: str, tmp_path: Path, gateway: str | None) -> SmokeOptions:
    return SmokeOptions(base_url=url, api_key=KEY, report_path=tmp_path / "smoke.json",
                        gateway=gateway,
                        settings=SmokeSettings(request_timeout_s=10, overall_timeout_s=60))


def _no_locator(profile_name: str) -> app.LocatedServer:
    raise AssertionError("--base-url needs no locator")


def _no_launcher(profile: Profile) -> Launcher:
    raise AssertionError("--base-url needs no launcher")


def _no_plots(report: object, out_dir: Path) -> list[Path]:
    return []


def test_reports_are_pushed_with_the_key_masked(sim_server: StartSim, tmp_path: Path) -> None:
    pushed: list[tuple[str, dict[str, Any], str]] = []

    def push(kind: str, report: dict[str, Any], gateway: str) -> None:
        pushed.append((kind, report, gateway))

    url = _sim(sim_server)
    console = Console(record=True, width=200)
    smoke = app.smoke(_smoke_request(url, tmp_path, GATEWAY), EvalRequest(), push=push,
                      client_factory=make_client, load_dataset=load_gsm8k)
    view.show_smoke(smoke, console)
    bench = app.bench(
        BenchOptions(BenchSettings(concurrency=(1,), requests_per_level=2, input_words=8,
                                   output_tokens=4, request_timeout_s=10),
                     api_key=KEY, base_urls=(url,), out_dir=tmp_path / "bench",
                     gateway=GATEWAY),
        launcher=_no_launcher,
        push=push, plot=_no_plots, client_factory=make_client,
    )
    view.show_bench(bench, console)
    assert smoke.error is None and bench.error is None
    assert [(kind, gateway) for kind, _, gateway in pushed] == [("smoke", GATEWAY),
                                                                ("bench", GATEWAY)]
    assert pushed[0][1]["passed"] is True and pushed[0][1]["kind"] == "smoke"
    assert pushed[1][1]["kind"] == "bench"
    # What observe makes of the pushed JSON: the simulator counts prompt tokens, so the input
    # rate is there, beside the output rate.
    bench_json = pushed[1][1]
    rates = {sample.name: sample.value
             for family in bench_families(bench_json, bench_json["variants"][0])
             for sample in family.samples if sample.labels.get("concurrency") == "1"}
    for rate in ("input", "output"):
        assert rates.get(f"opsctl_bench_{rate}_tokens_per_second", 0.0) > 0, rate
    assert all(report["api_key"] == "****5150" for _, report, _ in pushed)
    text = console.export_text()
    assert (
        f"pushed smoke metrics to {GATEWAY}" in text
        and f"pushed bench metrics to {GATEWAY}" in text
    )
    assert KEY not in repr(pushed) + text


def test_no_gateway_means_no_push(sim_server: StartSim, tmp_path: Path) -> None:
    def push(kind: str, report: dict[str, Any], gateway: str) -> None:
        raise AssertionError("no gateway: nothing to push")

    result = app.smoke(_smoke_request(_sim(sim_server), tmp_path, None), EvalRequest(),
                       push=push, client_factory=make_client, load_dataset=load_gsm8k)
    assert result.pushed is None and result.error is None


def test_a_failed_push_is_recorded_not_raised(sim_server: StartSim, tmp_path: Path) -> None:
    def push(kind: str, report: dict[str, Any], gateway: str) -> None:
        raise OpsctlError(f"Pushgateway {gateway} refused the {kind} metrics")

    result = app.smoke(_smoke_request(_sim(sim_server), tmp_path, GATEWAY), EvalRequest(),
                       push=push, client_factory=make_client, load_dataset=load_gsm8k)
    assert result.error is None and result.report.passed
    assert result.pushed is not None and "refused the smoke metrics" in (result.pushed.error or "")


def test_the_cli_warns_on_a_failed_push_but_keeps_the_verdict(
    sim_server: StartSim, opsctl: OpsctlRunner, tmp_path: Path
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = opsctl("smoke", "--base-url", _sim(sim_server), "--json", str(tmp_path / "s.json"),
                  "--pushgateway", f"http://127.0.0.1:{port}", OPSCTL_API_KEY=KEY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"push to http://127.0.0.1:{port} failed" in done.stdout
    assert "smoke PASS" in done.stdout and KEY not in done.stdout + done.stderr
