"""Throwaway copies of deploy/sim.yaml for the tests that drive the real engine: an own name
and port, a quick start, optionally a weights folder the simulator's eval mode reads, and the
removal of every container of that copy afterwards."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import docker
import yaml
from checkpoints import write_checkpoint

from opsctl.core.paths import project_root

EVAL_KEY = "sim-gsm8k-test.jsonl"


def sim_profile_data(
    prefix: str, host_port: int, warmup_seconds: str = "1"
) -> tuple[dict[str, Any], str]:
    """deploy/sim.yaml as a dict, renamed `<prefix>-<random>`, on `host_port`, loading in ~1 s."""
    data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    data["name"] = name
    data["container"]["host_port"] = host_port
    data["container"]["env"].update({"OPSCTL_SIM_LOAD_SECONDS": "1",
                                     "OPSCTL_SIM_WARMUP_SECONDS": warmup_seconds})
    return data, name


def add_weights(data: dict[str, Any], tmp_path: Path) -> Path:
    """Mount a weights folder (GLM-5's config.json, a tokenizer, a safetensors index with
    stand-in shards: what `up`'s preflight checks; the GSM8K answer key) into the profile, so
    checkpoint identity and `smoke --eval gsm8k` work in the simulator container."""
    weights = write_checkpoint(tmp_path / "weights")
    shutil.copy(project_root() / "deploy" / "evals" / EVAL_KEY, weights / EVAL_KEY)
    data["model"]["host_path"] = str(weights)
    data["container"]["env"]["OPSCTL_SIM_EVAL_KEY"] = (
        f"{data['model']['container_path']}/{EVAL_KEY}"
    )
    return weights


def write_profile(data: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def remove_containers(name: str) -> None:
    """Every container of profile `name`, whatever state it is in."""
    client = docker.from_env()
    for container in client.containers.list(all=True, filters={"label": f"opsctl.profile={name}"}):
        container.remove(force=True)


def sim_without_the_real_profiles_dsa_settings(tmp_path: Path) -> Path:
    """deploy/sim.yaml without the DSA backends and prefill-graph flag the real profile needs:
    flags a real sglang image would be refused for, which a simulator image is not judged by."""
    text = (project_root() / "deploy" / "sim.yaml").read_text()
    for line in ("  dsa_prefill_backend: trtllm", "  dsa_decode_backend: trtllm",
                 "  disable_prefill_cuda_graph: true"):
        text = "\n".join(row for row in text.splitlines() if not row.startswith(line))
    path = tmp_path / "sim-wrong.yaml"
    path.write_text(text + "\n")
    return path
