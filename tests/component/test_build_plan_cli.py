"""`opsctl build --dry-run` in a fresh process: every image listed, no engine."""

from __future__ import annotations

import os
import subprocess
import sys


def test_cli_build_dry_run_lists_every_image_without_an_engine() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "opsctl", "build", "-p", "glm5-nvfp4-rtx6000", "--dry-run"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("sglang  0.5.23") == 1 and "sglang  0.5.15" not in result.stdout
    assert ("variants  baseline, gathercast, bf16kv, bf16kv-mtp, fp8kv-mtp, gathercast-mtp, "
            "native, native-mtp") in result.stdout
