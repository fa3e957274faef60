"""`profile show` and `up --dry-run` in a fresh process: each variant's release and argv."""

from __future__ import annotations

import os
import subprocess
import sys

GLM = "glm5-nvfp4-rtx6000"


def test_profile_show_states_release_and_computation_of_every_variant() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "opsctl", "profile", "show", "-p", GLM, "-v", "native"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (
        lines[0].startswith("python3 -m sglang.launch_server")
        and "--attention-backend" not in lines[0]
    )
    assert lines[1].startswith("# variant native (shown above)")
    assert "#   sglang 0.5.23 on lmsysorg/sglang:v0.5.21-cu130, patch switch off" in lines
    assert "#   sglang 0.5.23 on lmsysorg/sglang:v0.5.21-cu130, patch switch on" in lines
    computes = [line for line in lines if line.startswith("#   computes: ")]
    assert len(computes) == 8
    assert computes[0].startswith("#   computes: sparse DSA attention")
    assert "flashinfer_sparse_mla" in computes[0]
    assert sum("dense MLA over the whole context" in line for line in computes) == 6
    speculative = [line for line in lines if line.startswith("#   speculative: ")]
    assert len(speculative) == 4
    patched = [line for line in speculative if "gather-then-cast" in line]
    assert len(patched) == 1 and "draft decode, target verify and draft extend" in patched[0]


def test_up_dry_run_of_native_renders_the_0523_argv() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "opsctl", "up", "-p", GLM, "-v", "native", "--dry-run"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "# sglang 0.5.23 on lmsysorg/sglang:v0.5.21-cu130, patch switch off" in lines
    argv = lines[lines.index("# sglang argv:") + 1]
    assert (
        argv.startswith("python3 -m sglang.launch_server")
        and "--cuda-graph-max-bs-decode 64" in argv
    )
    assert not any(flag in argv for flag in ("--attention-backend", "--dsa-", "--nsa-"))
    assert "--label opsctl.sglang-version=0.5.23" in result.stdout
