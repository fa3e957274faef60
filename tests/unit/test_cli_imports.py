"""`opsctl --help` and `opsctl status` import only what they use: no HTTP stack, Docker client or
kernel module for the help text; no aiohttp (smoke and bench's client) or kernel module for
status, which lists containers (Docker) and probes their health (httpx).

Read from `python -X importtime`, which names every module as it is first imported, whatever
way the process then exits (bench/cli_startup.py records the time this saves)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

_IMPORT = re.compile(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)")


def _imported(*args: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DOCKER_HOST": "unix:///nonexistent.sock"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "opsctl", *args],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120,
                          check=False)
    names = {m.group(1) for line in done.stderr.splitlines() if (m := _IMPORT.match(line))}
    assert "opsctl.cli" in names, done.stderr[-2000:]
    return names


def _loaded(names: set[str], package: str) -> bool:
    return any(name == package or name.startswith(package + ".") for name in names)


@pytest.mark.parametrize(("args", "unused"), [
    (("--help",), ("aiohttp", "httpx", "docker", "opsctl.engine.dockerpy", "opsctl.kernels",
                   "triton", "torch")),
    (("status",), ("aiohttp", "opsctl.kernels", "triton", "torch")),
])
def test_a_command_imports_no_stack_it_does_not_use(args: tuple[str, ...],
                                                    unused: tuple[str, ...]) -> None:
    names = _imported(*args)
    assert [package for package in unused if _loaded(names, package)] == []
