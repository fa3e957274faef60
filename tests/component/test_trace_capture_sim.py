"""`trace capture` against the simulator process: its profiler endpoints, and the whole capture
(load, /start_profile, the files, the analysis) for each `trace_cast` setting."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from conftest import SimServer

from opsctl.core.clock import SYSTEM_CLOCK
from opsctl.trace import capture as cap
from opsctl.trace.app import CapturePlan, capture
from opsctl.trace.load import LoadShape, steady_load

StartSim = Callable[..., SimServer]

FAST = {"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "5"}
SIM_FLAGS = ["--served-model-name", "glm-5", "--attention-backend", "flashinfer",
             "--kv-cache-dtype", "fp8_e4m3", "--tp-size", "2"]


def test_sim_profiler_endpoints(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim_server(env=FAST, args=SIM_FLAGS).url
    with httpx.Client(base_url=url, timeout=10) as client:
        assert client.post("/stop_profile").status_code == 500  # none runs
        started = client.post("/start_profile", json={"output_dir": str(tmp_path)})
        assert started.status_code == 200 and started.text == "Start profiling.\n"
        assert client.post("/start_profile", json={}).status_code == 500  # one runs already
        assert client.post("/start_profile", json={"num_steps": 0}).status_code == 400
        stopped = client.post("/stop_profile")
        assert stopped.status_code == 200
    files = sorted(tmp_path.glob("*-TP-*.trace.json.gz"))
    assert [f.name.split("-TP-")[1] for f in files] == ["0.trace.json.gz", "1.trace.json.gz"]
    doc = json.loads(gzip.decompress(files[0].read_bytes()))
    assert doc["traceEvents"] and not list(tmp_path.glob(".*"))


@pytest.mark.parametrize(("env", "expected", "absent"), [
    ({}, "full_pool_kv_cast", "gather_then_cast"),  # flashinfer + FP8 KV, switch off: stock
    ({"OPSCTL_KV_GATHER_CAST": "1"}, "gather_then_cast", "full_pool_kv_cast"),
    ({"OPSCTL_SIM_TRACE_CAST": "off"}, "gather_then_cast", "full_pool_kv_cast"),
])
def test_capture_end_to_end_against_the_simulator(sim_server: StartSim, tmp_path: Path,
                                                  env: dict[str, str], expected: str,
                                                  absent: str) -> None:
    url = sim_server(env={**FAST, **env}, args=SIM_FLAGS).url
    plan = CapturePlan(base_url=url, source=cap.LocalDir(tmp_path / "server"),
                       server_dir=str(tmp_path / "server"), profile="sim", variant="x",
                       concurrency=4, steps=4, out_dir=tmp_path / "out", wait_s=30, warmup_s=0.3)
    shape = LoadShape(input_words=16, output_tokens=400, request_timeout_s=30)
    result = capture(
        plan, http=lambda: httpx.Client(base_url=url, timeout=10),
        load=lambda u, c: steady_load(u, c, shape), clock=SYSTEM_CLOCK,
        plot=lambda *_: ([], None))
    assert [p.name.split("-TP-")[1] for p in result.traces] == ["0.trace.json.gz",
                                                                "1.trace.json.gz"]
    assert result.load.error is None and result.load.in_flight + result.load.completed >= 1
    first = result.analysis.analyses[0]
    found = [f.signature for f in first.findings]
    assert expected in found and absent not in found
    assert first.steps == 4 and first.meta["variant"] == "x"
    assert (tmp_path / "out" / "analysis.md").is_file()
