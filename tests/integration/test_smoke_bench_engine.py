"""`smoke --profile` and `bench --profile` through the real engine: the profile's container is
found by label (smoke) or brought up and taken down per variant (bench)."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from opsctl.core.errors import EXIT_LAUNCH

pytestmark = pytest.mark.docker


def _servers(profile: str) -> list:
    return docker.from_env().containers.list(
        all=True, filters={"label": f"opsctl.profile={profile}"}
    )


def test_smoke_finds_the_running_profile_by_label(
    opsctl, sim_image: str, own_sim, tmp_path: Path
) -> None:
    path = str(own_sim[0])
    up = opsctl("up", "--profile", path, "--variant", "gathercast", "--image", sim_image)
    assert up.returncode == 0, up.stderr
    report_path = tmp_path / "smoke.json"
    smoke = opsctl(
        "smoke", "--profile", path, "--variant", "gathercast", "--json", str(report_path)
    )
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    report = json.loads(report_path.read_text())
    assert report["passed"] is True and report["variant"] == "gathercast"
    assert report["model"]["served_name"] == "glm-5"


def test_smoke_without_a_running_server_is_exit_4(opsctl, sim_image: str, own_sim) -> None:
    smoke = opsctl("smoke", "--profile", str(own_sim[0]))
    assert smoke.returncode == EXIT_LAUNCH, smoke.stderr
    assert "opsctl up" in smoke.stderr


def test_bench_brings_each_variant_up_and_down(
    opsctl, sim_image: str, own_sim, tmp_path: Path
) -> None:
    path, name = own_sim
    out = tmp_path / "bench"
    bench = opsctl(
        "bench",
        "--profile",
        str(path),
        "--image",
        sim_image,
        "--variants",
        "baseline,gathercast",
        "--concurrency",
        "1,4",
        "--requests",
        "8",
        "--input-words",
        "32",
        "--output-tokens",
        "16",
        "--out",
        str(out),
        timeout=600,
    )
    assert bench.returncode == 0, bench.stdout + bench.stderr
    report = json.loads((out / "bench.json").read_text())
    assert [v["variant"] for v in report["variants"]] == ["baseline", "gathercast"]
    assert all(v["launched_by_bench"] for v in report["variants"])
    assert report["failed_requests"] == 0
    for name in ("bench.md", "bench_serving.csv", "tpot.png", "ttft.png", "throughput.png",
                 "pareto.png"):
        assert (out / name).stat().st_size > 0
    assert _servers(name) == []
