"""`opsctl build` on the real engine with a profile whose base is not there: exit 3 and one
line naming the tag and the `docker pull`, before anything is built; the host driver comes from
the FAKE nvidia-smi of tests/unit/test_basecheck.py (a sample, not a real driver's output)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import fake_nvidia_smi

from opsctl.core.errors import EXIT_BUILD

BASE = "lmsysorg/sglang:v0.5.21-cu130"
GLM5 = "glm5-nvfp4-rtx6000"


@pytest.mark.docker
def test_build_cli_with_the_base_missing_exits_3_with_one_line(tmp_path: Path) -> None:
    folder = fake_nvidia_smi(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
           "OPSCTL_FAKE_DRIVER": "575.57.08\n"}
    done = subprocess.run([sys.executable, "-m", "opsctl", "build", "--profile", GLM5],
                          capture_output=True, text=True, env=env, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == EXIT_BUILD, done.stdout + done.stderr
    assert f"base image {BASE} is not present on this engine" in done.stderr
    assert f"docker pull {BASE}" in done.stderr
    assert "Traceback" not in done.stderr
