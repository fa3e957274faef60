"""The `opsctl smoke` and `opsctl bench` commands end to end: exit codes, files, masking."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import REPO_ROOT, SimServer

StartSim = Callable[..., SimServer]
FAST = {"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "2"}
KEY = "sk-cli-sentinel-key-31337"


def opsctl(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPSCTL_API_KEY",
                                                            "OPSCTL_PUSHGATEWAY")}
    if key:
        env["OPSCTL_API_KEY"] = key
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "opsctl", *args], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)


def sim(start: StartSim, *args: str, **env: str) -> str:
    return start(env={**FAST, **env}, args=["--enable-metrics", *args]).url


def test_smoke_passes_with_key_masked_everywhere(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server, "--served-model-name", "glm-5", "--api-key", KEY)
    report = tmp_path / "smoke.json"
    done = opsctl("smoke", "--base-url", url, "--json", str(report), key=KEY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert KEY not in done.stdout + done.stderr + report.read_text()
    assert "****1337" in done.stdout
    assert "model: 'glm-5'" in done.stdout
    assert json.loads(report.read_text())["passed"] is True


def test_smoke_compare_mismatch_exits_5(sim_server: StartSim, tmp_path: Path) -> None:
    reference = tmp_path / "baseline.json"
    assert opsctl("smoke", "--base-url", sim(sim_server), "--json", str(reference)).returncode == 0
    corrupt = sim(sim_server, OPSCTL_SIM_FAULT="corrupt")
    done = opsctl("smoke", "--base-url", corrupt, "--json", str(tmp_path / "b.json"),
                  "--compare-with", str(reference))
    assert done.returncode == 5, done.stdout + done.stderr
    assert "compare" in done.stderr and "Traceback" not in done.stderr


def test_smoke_unreachable_exits_4_and_still_writes_the_report(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = tmp_path / "smoke.json"
    done = opsctl("smoke", "--base-url", f"http://127.0.0.1:{port}", "--json", str(report))
    assert done.returncode == 4, done.stdout + done.stderr
    assert json.loads(report.read_text())["reachable"] is False


def test_bench_writes_the_report_and_exits_0(sim_server: StartSim, tmp_path: Path) -> None:
    a, b = sim(sim_server, OPSCTL_SIM_ITL_MS="4"), sim(sim_server, OPSCTL_SIM_ITL_MS="3")
    out = tmp_path / "bench"
    done = opsctl("bench", "--base-url", f"baseline={a}", "--base-url", f"gathercast={b}",
                  "--concurrency", "1,2", "--requests", "4", "--input-words", "16",
                  "--output-tokens", "8", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "bench.md",
                                                     "bench_serving.csv", "bench_serving.jsonl",
                                                     "pareto.png", "requests", "throughput.png",
                                                     "tpot.png", "ttft.png"]
    assert sorted(str(p.relative_to(out)) for p in (out / "requests").rglob("*.jsonl")) == [
        "requests/01-baseline/c1.jsonl", "requests/01-baseline/c2.jsonl",
        "requests/02-gathercast/c1.jsonl", "requests/02-gathercast/c2.jsonl"]
    data = json.loads((out / "bench.json").read_text())
    assert [v["variant"] for v in data["variants"]] == ["baseline", "gathercast"]


def test_bench_with_failed_requests_exits_5(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server, OPSCTL_SIM_FAULT="error_rate", OPSCTL_SIM_ERROR_RATE="0.25")
    done = opsctl("bench", "--base-url", url, "--concurrency", "2", "--requests", "6",
                  "--output-tokens", "4", "--input-words", "8", "--out", str(tmp_path))
    assert done.returncode == 5, done.stdout + done.stderr
    assert "request(s) failed" in done.stderr
    assert json.loads((tmp_path / "bench.json").read_text())["failed_requests"] == 2
