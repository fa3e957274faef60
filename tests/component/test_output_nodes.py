"""`--json` onto a FIFO or a device node: exit 2 with one line, the node left as it was.

Issue 25, defect H1: `verify ... --json /dev/full` exited 0 and replaced /dev/full with a regular
file (the report's atomic rename). The nodes here are made in tmp (a FIFO; a character device
with /dev/null's numbers, made with mknod as root): no test touches the real /dev. The
simulator answers, so a command that got past the check would reach its write.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO_ROOT, SimServer

StartSim = Callable[..., SimServer]
FAST = {"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "2", "OPSCTL_SIM_LOAD_SECONDS": "0",
        "OPSCTL_SIM_WARMUP_SECONDS": "0"}


def opsctl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSCTL_API",
                                                                    "OPSCTL_PUSHGATEWAY"))}
    return subprocess.run([sys.executable, "-m", "opsctl", *args], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def make_node(kind: str, folder: Path) -> Path:
    path = folder / f"a-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs root (CAP_MKNOD)")
    return path


@pytest.mark.parametrize("kind", ["fifo", "char-device"])
@pytest.mark.parametrize("command", ["verify", "smoke"])
def test_json_onto_a_node_exits_2_and_leaves_it(command: str, kind: str, tmp_path: Path,
                                                sim_server: StartSim) -> None:
    url = sim_server(env=FAST, args=["--enable-metrics"]).url
    node = make_node(kind, tmp_path)
    mode = os.lstat(node).st_mode
    extra = ["--profile", "sim"] if command == "verify" else []
    done = opsctl(command, "--base-url", url, *extra, "--json", str(node))
    assert stat.filemode(os.lstat(node).st_mode) == stat.filemode(mode)  # still FIFO/device
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    error = [line for line in done.stderr.splitlines() if "--json" in line]
    assert len(error) == 1 and "not a regular file" in error[0], done.stderr
    assert [p.name for p in tmp_path.iterdir()] == [node.name]  # no temporary file left
