"""Profile errors and the default profile as a user meets them: `opsctl` in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from opsctl.core.errors import EXIT_USAGE
from opsctl.core.paths import project_root


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def _sim_text() -> str:
    return (project_root() / "deploy" / "sim.yaml").read_text()


def _opsctl(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)


def test_cli_profile_errors_are_one_line_with_hint_and_exit_2(tmp_path: Path) -> None:
    text = _sim_text().replace("  tp_size: 8", "  tp_size: 8\n  tp_size: 4")
    path = _write(tmp_path, text)
    result = _opsctl("profile", "show", "--profile", str(path))
    assert result.returncode == EXIT_USAGE
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error:") and lines[1].startswith("hint:")
    result = _opsctl("up", "--profile", "sim", "--variant", "fastest", "--dry-run")
    assert result.returncode == EXIT_USAGE and "valid variants" in result.stderr


def test_cli_dry_run_touches_no_engine() -> None:
    # A daemon address that cannot answer: the dry run must not need it.
    result = _opsctl(
        "up",
        "--profile",
        "glm5-nvfp4-rtx6000",
        "--variant",
        "gathercast",
        "--dry-run",
        DOCKER_HOST="unix:///nonexistent/docker.sock",
    )
    assert result.returncode == 0, result.stderr
    assert "docker run" in result.stdout and "--gpus" in result.stdout
    assert "sglang.launch_server" in result.stdout


def test_default_profile_comes_from_the_environment() -> None:
    result = _opsctl("profile", "show", OPSCTL_PROFILE="glm5-nvfp4-rtx6000")
    assert result.returncode == 0, result.stderr
    assert "--tp-size 8" in result.stdout and "sglang.launch_server" in result.stdout
