"""`opsctl doctor` in a fresh process, as a user runs it: one line and the documented exit code,
with no GPU tools on PATH and no Docker engine (the checks themselves:
tests/unit/test_doctor.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opsctl.core.errors import EXIT_HOST, EXIT_USAGE
from opsctl.doctor.checks import FAIL, NO_GPU


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": str(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-m", "opsctl", "doctor", *args], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=60, check=False)


def test_cli_on_the_sim_profile_exits_7_with_a_table_and_a_json_report(tmp_path: Path) -> None:
    done = _cli(tmp_path, "-p", "sim", "--json")
    assert done.returncode == EXIT_HOST, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "host not ready for profile sim" in errors[0]
    assert NO_GPU in done.stdout and "GPU compute capability" in done.stdout
    written = list((tmp_path / "out").glob("doctor-*.json"))
    assert len(written) == 1
    report = json.loads(written[0].read_text())
    assert report["ok"] is False and report["profile"] == "sim"
    names = {row["name"]: row for row in report["checks"]}
    assert names["GPU count"] == {"name": "GPU count", "status": FAIL, "detail": NO_GPU,
                                  "fix": names["GPU count"]["fix"]}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--gpu-count", "0"), "0 is not between 1 and 64"),
        (("--gpu-count", "many"), "Invalid value for '--gpu-count'"),
        (
            ("--checkpoint", "/nonexistent/ckpt"),
            "--checkpoint /nonexistent/ckpt is not a readable folder",
        ),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    done = _cli(tmp_path, *args)
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
