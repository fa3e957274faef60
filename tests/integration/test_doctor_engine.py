"""`opsctl doctor` against the real Docker engine: its version and info read back, a throwaway
container asked for every GPU (on a host without the NVIDIA runtime or CDI, the engine's own
refusal, and nothing left behind), and the CLI on the sim profile, once without nvidia-smi and
once with the FAKE one of tests/doctor_samples.py (its answers are samples, not a driver's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest
from doctor_samples import fake_tools

from opsctl.core.errors import EXIT_HOST
from opsctl.doctor.checks import NO_GPU
from opsctl.engine.dockerpy import connect

DEBIAN_BASE = "opsctl/debian-base:bookworm"  # scripts/setup.sh builds it; the sim profile's base


def _verify_containers(client: docker.DockerClient) -> set[str]:
    return {c.name for c in client.containers.list(all=True) if c.name.startswith("opsctl-verify-")}


@pytest.mark.docker
def test_engine_info_and_a_gpu_container_on_the_real_engine() -> None:
    client = docker.from_env(timeout=10)
    engine = connect()
    info = engine.info()
    assert info.version == client.version()["Version"]
    assert info.root_dir == client.info()["DockerRootDir"]
    assert "runc" in info.runtimes
    before = _verify_containers(client)
    code, output = engine.run_to_completion(DEBIAN_BASE, ["nvidia-smi", "-L"], timeout_seconds=20,
                                            gpus=True)
    if "nvidia" not in info.runtimes and not info.cdi_spec_dirs:  # this CI host: no GPU stack
        assert code == 125, output
        assert "could not select device driver" in output
    else:  # a GPU host: the NVIDIA runtime puts nvidia-smi into the container
        assert code == 0 and "GPU 0:" in output, output
    assert _verify_containers(client) == before


def _doctor(tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    return subprocess.run([sys.executable, "-m", "opsctl", "doctor", "-p", "sim", "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
                          check=False, stdin=subprocess.DEVNULL)


def _rows(tmp_path: Path) -> dict[str, dict[str, str]]:
    (report,) = (tmp_path / "out").glob("doctor-*.json")
    rows = {row["name"]: row for row in json.loads(report.read_text())["checks"]}
    report.unlink()
    return rows


@pytest.mark.docker
def test_doctor_cli_on_the_sim_profile_with_the_real_engine(tmp_path: Path) -> None:
    # Without nvidia-smi (this host): the GPU rows fail with one line, the rest is checked.
    done = _doctor(tmp_path, str(tmp_path / "empty"))
    assert done.returncode == EXIT_HOST, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert sum(line.startswith("error:") for line in done.stderr.splitlines()) == 1
    rows = _rows(tmp_path)
    assert rows["docker"]["status"] == "pass"
    assert rows["docker"]["detail"].startswith(f"Docker {docker.from_env().version()['Version']}")
    assert rows["GPU count"]["detail"] == NO_GPU and rows["GPUs in a container"]["detail"] == NO_GPU
    assert rows[f"base {DEBIAN_BASE}"]["status"] in {"pass", "warn"}  # present; locked or not yet
    assert (
        rows["disk (images)"]["status"] in {"pass", "fail"}
        and "at " in rows["disk (images)"]["detail"]
    )

    # With the FAKE nvidia-smi (8 sample GPUs): the real engine is asked for GPUs in a container.
    folder = fake_tools(tmp_path / "bin")
    done = _doctor(tmp_path, f"{folder}{os.pathsep}{os.environ['PATH']}")
    assert "Traceback" not in done.stderr, done.stderr
    rows = _rows(tmp_path)
    assert rows["GPU count"]["status"] == "pass" and rows["GPU model"]["status"] == "pass"
    gpu_row = rows["GPUs in a container"]
    info = connect().info()
    if "nvidia" not in info.runtimes and not info.cdi_spec_dirs:
        assert gpu_row["status"] == "fail" and "could not select device driver" in gpu_row["detail"]
        assert done.returncode == EXIT_HOST
