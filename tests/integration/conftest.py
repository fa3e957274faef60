"""Fixtures for tests against the real Docker engine: the CLI as a subprocess, the sim image."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest

OpsctlRunner = Callable[..., subprocess.CompletedProcess[str]]


def _run_opsctl(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """`opsctl ARGS` as a user runs it: a fresh process, no stdin, extra environment."""
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def opsctl() -> OpsctlRunner:
    return _run_opsctl


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    def pick() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    return pick


@pytest.fixture(scope="session")
def sim_image() -> str:
    """The simulator image, built once through the real `opsctl build` path."""
    result = _run_opsctl("build", "--profile", "sim", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    from opsctl.build import expected_image
    from opsctl.profiles import load_profile

    return expected_image(load_profile("sim"))
