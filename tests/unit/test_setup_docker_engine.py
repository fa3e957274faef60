"""scripts/docker-engine.sh: how setup.sh tells an installed Docker engine (used as it is) from
none at all (the only case where it installs Debian's docker.io)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "scripts" / "docker-engine.sh"
BASH = shutil.which("bash") or "/bin/bash"


def _run(function: str, *args: str, path: Path) -> subprocess.CompletedProcess[str]:
    script = f'. "{LIB}"; {function} "$@"'
    return subprocess.run([BASH, "--norc", "-c", script, "bash", *args], env={"PATH": str(path)},
                          capture_output=True, text=True, timeout=30)


def _tool(folder: Path, name: str) -> Path:
    tool = folder / name
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    return tool


@pytest.mark.skipif(Path("/snap/docker/current").is_dir(), reason="this host has the docker snap")
def test_no_cli_daemon_or_socket_is_no_engine(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    run = _run("docker_engine_signs", str(tmp_path / "absent.sock"), str(tmp_path), path=empty)
    assert run.returncode == 1 and run.stdout == ""


@pytest.mark.parametrize("name", ["dockerd", "dockerd-rootless.sh"])
def test_any_engine_binary_on_path_is_an_installed_engine(tmp_path: Path, name: str) -> None:
    tool = _tool(tmp_path, name)
    run = _run("docker_engine_signs", path=tmp_path)
    assert run.returncode == 0
    assert f"{name} at {tool}" in run.stdout.splitlines()


@pytest.mark.skipif(Path("/snap/docker/current").is_dir(), reason="this host has the docker snap")
def test_a_docker_cli_alone_is_no_engine(tmp_path: Path) -> None:
    # A machine image may carry the client with no daemon: setup must install one there.
    _tool(tmp_path, "docker")
    run = _run("docker_engine_signs", str(tmp_path / "absent.sock"), path=tmp_path)
    assert run.returncode == 1 and run.stdout == ""


def test_a_daemon_socket_alone_is_an_installed_engine(tmp_path: Path) -> None:
    # e.g. a rootless engine of another user: its socket, none of its binaries on this PATH.
    empty = tmp_path / "bin"
    empty.mkdir()
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        run = _run("docker_engine_signs", str(tmp_path / "absent.sock"), str(path), path=empty)
    assert run.returncode == 0
    assert run.stdout.splitlines() == [f"a daemon socket at {path}"]


def test_an_engine_that_does_not_answer_is_not_running(tmp_path: Path) -> None:
    _tool(tmp_path, "docker").write_text("#!/bin/sh\nexit 1\n")
    assert _run("docker_engine_running", path=tmp_path).returncode == 1


@pytest.mark.docker
def test_the_running_engine_is_named_with_its_version() -> None:
    docker = shutil.which("docker")
    assert docker, "the docker CLI"
    version = subprocess.run(
        [docker, "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    run = _run("docker_engine_running", path=Path(docker).parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"Docker engine {version} at ")
