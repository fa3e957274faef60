"""The gpu-sglang tier: checks against REAL sglang 0.5.15 servers (never in CI).

bench/run_sglang_gpu.sh starts two servers of the tiny MLA model on the H200 (baseline with the
patch switch off, gathercast with it on), then runs this file with
    OPSCTL_SGLANG_BASELINE=http://127.0.0.1:30000  OPSCTL_SGLANG_GATHERCAST=http://127.0.0.1:30001
    OPSCTL_SGLANG_LOGS=/tmp   (server-baseline.log, server-gathercast.log)
Without them every test is skipped.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.gpu_sglang]

BASELINE = os.environ.get("OPSCTL_SGLANG_BASELINE")
GATHERCAST = os.environ.get("OPSCTL_SGLANG_GATHERCAST")
LOGS = Path(os.environ.get("OPSCTL_SGLANG_LOGS", "/tmp"))
needs_servers = pytest.mark.skipif(
    not (BASELINE and GATHERCAST),
    reason="OPSCTL_SGLANG_BASELINE/GATHERCAST unset (bench/run_sglang_gpu.sh sets them)",
)


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


@needs_servers
@pytest.mark.parametrize("variant", ["baseline", "gathercast"])
def test_the_real_server_resolved_the_profile_flags(variant: str) -> None:
    info = _get(f"{BASELINE if variant == 'baseline' else GATHERCAST}/server_info")
    assert info["version"] == "0.5.15"
    assert (info["attention_backend"], info["kv_cache_dtype"]) == ("flashinfer", "fp8_e4m3")
    assert info["cuda_graph_config"]["decode"]["max_bs"] == 64
    assert info["disable_cuda_graph"] is False
    assert info["max_total_num_tokens"] == 4_000_000


@needs_servers
def test_the_patch_marker_says_inactive_on_baseline_and_active_on_gathercast() -> None:
    base = (LOGS / "server-baseline.log").read_text(errors="replace")
    gather = (LOGS / "server-gathercast.log").read_text(errors="replace")
    assert "opsctl-kv-gather-cast: inactive reason=switch_off" in base
    assert "opsctl-kv-gather-cast: active" not in base
    active = re.search(
        r"opsctl-kv-gather-cast: active workspace_bytes=(\d+) rows=(\d+) row_elems=(\d+)", gather
    )
    assert active is not None
    workspace, rows, row_elems = map(int, active.groups())
    info = _get(f"{GATHERCAST}/server_info")
    # the pool's rows, page 0 included
    assert rows == info["max_total_num_tokens"] + info["page_size"]
    assert row_elems == 576 and workspace == rows * row_elems * 2


@needs_servers
def test_greedy_outputs_are_identical_across_the_variants() -> None:
    prompts = [
        "Request 0: time year people way day man thing",
        "Request 1: " + " ".join(["world school state family"] * 60),
        "Request 2: water room mother area money story fact month lot right study",
    ]
    for prompt in prompts:
        body = {"model": "tiny-mla", "prompt": prompt, "max_tokens": 48, "temperature": 0}
        a = _post(f"{BASELINE}/v1/completions", body)["choices"][0]["text"]
        b = _post(f"{GATHERCAST}/v1/completions", body)["choices"][0]["text"]
        assert a and a == b


@needs_servers
def test_the_served_name_is_listed() -> None:
    for url in (BASELINE, GATHERCAST):
        assert [m["id"] for m in _get(f"{url}/v1/models")["data"]] == ["tiny-mla"]
