"""`smoke --long-context` against the `sim` profile's container: the probes run offline against
the containerised simulator exactly as against a real server (the image holds no GSM8K key, so
`--eval gsm8k` is exercised against local simulators in tests/unit/test_smoke_evals_sim.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker


def test_long_context_probes_pass_on_the_profile_container(
    opsctl, sim_image: str, own_sim: tuple[Path, str], tmp_path: Path
) -> None:
    path = str(own_sim[0])
    up = opsctl("up", "--profile", path, "--variant", "baseline", "--image", sim_image)
    assert up.returncode == 0, up.stderr
    report_path = tmp_path / "smoke.json"
    smoke = opsctl("smoke", "--profile", path, "--long-context", "--json", str(report_path))
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    report = json.loads(report_path.read_text())
    assert [p["name"] for p in report["long_context"]] == [
        "needle-4k", "needle-16k", "needle-64k", "prefix-pair-16k"]
    assert all(p["passed"] for p in report["long_context"])
