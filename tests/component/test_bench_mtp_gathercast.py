"""bench/mtp_gathercast_gpu.py on a CPU machine: everything up to sglang's start, then exit 3.

The device call (issue 35) must be measurement only, so the model, the three servers' plan and
the prompts are made and checked here; the script must stop, say so, before the first server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

pytest.importorskip("torch", reason="the tiny model is written with torch")
pytest.importorskip("safetensors", reason="the tiny model is saved as safetensors")

SCRIPT = REPO_ROOT / "bench" / "mtp_gathercast_gpu.py"


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_runs_on_cpu_until_sglang_needs_cuda(tmp_path: Path) -> None:
    out, models = tmp_path / "out", tmp_path / "models"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--models", str(models),
         "--contexts", "16,64", "--repeats", "2"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("stopped before starting sglang: needs CUDA from here")
    assert not list(out.glob("server-*.log")) and not (out / "results.json").exists()

    plan = json.loads((out / "plan.json").read_text())
    assert (plan["contexts"], plan["prompts"]) == ([16, 64], 4)
    servers = {entry["variant"]: entry for entry in plan["plan"]}
    assert list(servers) == ["fp8kv-mtp", "gathercast-mtp", "bf16kv-mtp"]
    for name, entry in servers.items():
        argv = entry["argv"]
        assert _flag(argv, "--model-path") == str(models / "tiny-glm5-mtp")
        assert _flag(argv, "--speculative-algorithm") == "EAGLE"
        assert (_flag(argv, "--speculative-num-steps"), _flag(argv, "--speculative-eagle-topk"),
                _flag(argv, "--speculative-num-draft-tokens")) == ("3", "1", "4")
        assert _flag(argv, "--attention-backend") == "flashinfer"
        assert _flag(argv, "--kv-cache-dtype") == ("bf16" if name == "bf16kv-mtp" else "fp8_e4m3")
        assert entry["env"] == {"OPSCTL_KV_GATHER_CAST": "1" if name == "gathercast-mtp" else "0"}
    assert len({entry["url"] for entry in servers.values()}) == 3

    model = models / "tiny-glm5-mtp"
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["GlmMoeDsaForCausalLM"]
    assert config["num_nextn_predict_layers"] == 1
    from safetensors import safe_open

    with safe_open(str(model / "model.safetensors"), framework="pt") as weights:
        names = set(weights.keys())
    nextn = f"model.layers.{config['num_hidden_layers']}."
    for part in ("enorm", "hnorm", "eh_proj", "shared_head.norm", "self_attn.kv_a_proj_with_mqa",
                 "self_attn.indexer.wk", "mlp.experts.0.down_proj", "mlp.gate"):
        assert nextn + part + ".weight" in names, part
