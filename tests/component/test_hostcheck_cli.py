"""`opsctl host p2p` in a fresh process without nvidia-smi."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from opsctl.core.errors import EXIT_HOST


def test_cli_without_nvidia_smi_exits_7_host_not_ready_as_doctor(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "opsctl", "host", "p2p"], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "PATH": str(tmp_path)})
    assert result.returncode == EXIT_HOST, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error: nvidia-smi not found") and lines[1].startswith("hint:")
