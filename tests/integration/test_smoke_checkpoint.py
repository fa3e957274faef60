"""smoke learns the running server's checkpoint from the label `up` put on it, end to end through
the CLI: the report records it, and a `--compare-with` report of another checkpoint warns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from simprofile import add_weights, remove_containers, sim_profile_data, write_profile

from opsctl.core.checkpoint import checkpoint_id

pytestmark = pytest.mark.docker
TIMEOUT_S = 300


def test_smoke_records_the_running_checkpoint_and_warns_on_another(
    opsctl, sim_image: str, free_port, tmp_path: Path
) -> None:
    data, name = sim_profile_data("it-ckpt", free_port())
    weights = add_weights(data, tmp_path)
    path = write_profile(data, tmp_path)
    try:
        up = opsctl("up", "--profile", str(path), "--variant", "baseline", "--image", sim_image,
                    timeout=TIMEOUT_S)
        assert up.returncode == 0, up.stdout + up.stderr
        first = tmp_path / "first.json"
        done = opsctl("smoke", "--profile", str(path), "--json", str(first), timeout=TIMEOUT_S)
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(first.read_text())
        assert report["checkpoint"]["id"] == checkpoint_id(weights).combined

        other = tmp_path / "other.json"
        other.write_text(json.dumps({**report, "checkpoint": {"id": "f" * 64}}))
        compared = opsctl("smoke", "--profile", str(path), "--compare-with", str(other),
                          "--json", str(tmp_path / "second.json"), COLUMNS="400", timeout=TIMEOUT_S)
        assert compared.returncode == 0, compared.stdout + compared.stderr
        assert "warning:" in compared.stdout and "differs from the reference's" in compared.stdout
        same = opsctl("smoke", "--profile", str(path), "--compare-with", str(first),
                      "--json", str(tmp_path / "third.json"), timeout=TIMEOUT_S)
        assert same.returncode == 0 and "differs from the reference's" not in same.stdout
    finally:
        remove_containers(name)
