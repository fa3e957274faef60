"""The simulator image on the real engine: staged from what the simulator imports, trusted only
once verified on this host.

A project copy (OPSCTL_PROJECT_DIR) holds a stray, untracked `opsctl/sim/zz_stray.py`: the image
must not contain it. The copy's image has the checkout's content hash, so it may exist already;
with a fresh state directory it has no verification record, so `build` verifies it again rather
than calling it up to date, and a Ctrl-C during that verification leaves it unrecorded.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from opsctl.core.paths import project_root

pytestmark = pytest.mark.docker
STRAY = "zz_stray.py"


@pytest.fixture
def copy(tmp_path: Path) -> dict[str, str]:
    root = tmp_path / "project"
    for name in ("opsctl", "deploy", "docker", "patches"):
        shutil.copytree(project_root() / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__", "locks"))
    (root / "opsctl" / "sim" / STRAY).write_text("raise SystemExit('never baked in')\n")
    return {"OPSCTL_PROJECT_DIR": str(root), "OPSCTL_LOCK_DIR": str(tmp_path / "locks"),
            "OPSCTL_STATE_DIR": str(tmp_path / "state")}


def build(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", "build", "--profile", "sim"],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=900,
                          stdin=subprocess.DEVNULL)


def test_a_stray_module_is_not_baked_in_and_trust_needs_a_verification(copy: dict[str, str]
                                                                         ) -> None:
    first = build(copy)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "built and verified" in first.stderr or "verified again" in first.stderr
    tag = first.stdout.strip().splitlines()[-1]
    listing = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "ls",
                              tag, "/opt/opsctl/app/opsctl/sim"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert "server.py" in listing and STRAY not in listing

    # Ctrl-C while the image is being verified: no record, so the next build verifies it again.
    fresh = {**copy, "OPSCTL_STATE_DIR": copy["OPSCTL_STATE_DIR"] + "-2"}
    proc = subprocess.Popen([sys.executable, "-m", "opsctl", "build", "--profile", "sim"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **fresh}, stdin=subprocess.DEVNULL)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "verifying" in line:
            proc.send_signal(signal.SIGINT)
            break
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    # ... and the throwaway container is gone, even when the Ctrl-C came while it was created.
    left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=opsctl.role=verify"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert left == []
    again = build(fresh)
    assert again.returncode == 0, again.stderr
    assert "verified again" in again.stderr and "up to date" not in again.stderr
    third = build(fresh)
    assert third.returncode == 0 and "up to date" in third.stderr

    # Issue 25, L: `build --force` interrupted while verifying keeps the verified image tagged.
    assert interrupted_in_verification(fresh, "--force") == 130
    kept = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag],
                          capture_output=True, text=True)
    assert kept.returncode == 0, kept.stderr
    fourth = build(fresh)
    assert fourth.returncode == 0 and "up to date" in fourth.stderr, fourth.stderr


def interrupted_in_verification(env: dict[str, str], *extra: str) -> int:
    """`build --profile sim` with SIGINT once it says it is verifying; its exit code."""
    proc = subprocess.Popen([sys.executable, "-m", "opsctl", "build", "--profile", "sim", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env}, stdin=subprocess.DEVNULL)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "verifying" in line:
            proc.send_signal(signal.SIGINT)
            break
    proc.communicate(timeout=120)
    return proc.returncode
