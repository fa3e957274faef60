"""A first hour's papercuts (issue 33 item 6), as a user meets them in a fresh process:
`--version`, `-h`, typer's shell completion and `status --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from stubhttp import StubServer, docker_routes, json_answer

import opsctl
from opsctl.core.paths import project_root


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_version_prints_the_packages_one_version() -> None:
    result = run("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"opsctl {opsctl.__version__}\n"
    project = tomllib.loads((project_root() / "pyproject.toml").read_text())["project"]
    assert "version" in project["dynamic"] and "version" not in project  # one truth: __init__


@pytest.mark.parametrize("args", [["-h"], ["status", "-h"], ["profile", "resolve", "-h"]])
def test_h_is_help_everywhere(args: list[str]) -> None:
    short, long = run(*args), run(*args[:-1], "--help")
    assert short.returncode == 0, short.stderr
    assert short.stdout == long.stdout and "Usage: " in short.stdout


def test_shell_completion_is_typers_own() -> None:
    """Through the console script a user installs (completion keys on the program's name)."""
    script = Path(sys.executable).parent / "opsctl"

    def installed(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), *args], capture_output=True, text=True,
                              env={**os.environ, **env}, timeout=120, stdin=subprocess.DEVNULL)

    shown = installed("--show-completion", "bash")
    assert shown.returncode == 0, shown.stderr
    assert "_OPSCTL_COMPLETE=complete_bash" in shown.stdout
    completed = installed(_OPSCTL_COMPLETE="complete_bash", COMP_WORDS="opsctl stat",
                          COMP_CWORD="1")
    assert completed.stdout.split() == ["status"]


def test_status_json_is_one_json_object() -> None:
    ident = "c" * 64
    labels = {"opsctl.managed": "true", "opsctl.role": "server", "opsctl.profile": "sim",
              "opsctl.variant": "baseline", "opsctl.image": "opsctl/sim:abc"}
    inspected = {"Id": ident, "Name": "/opsctl-sim", "Config": {"Labels": labels},
                 "State": {"Status": "exited", "ExitCode": 1,
                           "FinishedAt": "2026-12-05T08:00:00.000000000Z"}}
    routes = docker_routes({
        rf"/containers/{ident}/json": json_answer(200, json.dumps(inspected)),
        r"/containers/json": json_answer(200, json.dumps([{"Id": ident}])),
    })
    with StubServer(routes) as engine:  # type: ignore[arg-type]
        result = run("status", "--json", DOCKER_HOST=engine.url.replace("http://", "tcp://"))
    assert result.returncode == 0, result.stderr
    (server,) = json.loads(result.stdout)["servers"]
    assert (server["name"], server["profile"], server["variant"], server["readiness"]) == (
        "opsctl-sim", "sim", "baseline", "exited (exit 1)")
    assert {"verdict", "health", "restarts", "last_exit", "crash_loop"} <= set(server)
