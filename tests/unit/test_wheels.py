"""The one wheel cache: lookup, download failures, and every user of it honouring
$OPSCTL_WHEEL_CACHE."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opsctl.argspec import extract
from opsctl.core import wheels
from opsctl.core.errors import EXIT_BUILD, BuildError

THIS_PYTHON = f"cp{sys.version_info.major}{sys.version_info.minor}"


def test_find_takes_the_version_asked_for_and_a_wheel_this_python_installs(tmp_path: Path) -> None:
    other_python = tmp_path / "msgspec-0.23.0-cp27-cp27-manylinux_2_17_x86_64.whl"
    ours = tmp_path / f"msgspec-0.23.0-{THIS_PYTHON}-{THIS_PYTHON}-manylinux_2_17_x86_64.whl"
    for path in (other_python, ours, tmp_path / "sglang-0.5.15-py3-none-any.whl"):
        path.write_bytes(b"")
    assert wheels.find(tmp_path, "msgspec", "0.23.0") == ours
    assert wheels.find(tmp_path, "sglang", "0.5.15") == tmp_path / "sglang-0.5.15-py3-none-any.whl"
    assert wheels.find(tmp_path, "sglang", "0.5.23") is None
    assert wheels.find(tmp_path / "absent", "sglang", "0.5.15") is None


def test_fetch_reads_the_cache_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = tmp_path / "prometheus_client-0.26.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setenv(wheels.WHEEL_CACHE_ENV, str(tmp_path))
    assert wheels.cache_dir() == tmp_path
    assert wheels.fetch("prometheus-client", "0.26.0") == wheel


def test_a_user_caches_wheels_in_their_own_cache_root_in_the_hosts(tmp_path: Path) -> None:
    """An installed opsctl run by a user (pipx, uv tool) cannot write under /var/cache."""
    home = Path.home()
    assert wheels.cache_dir({}, root=True) == wheels.DEFAULT_WHEEL_CACHE
    assert wheels.cache_dir({}, root=False) == home / ".cache" / "opsctl-wheels"
    assert wheels.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}, root=False) == \
        tmp_path / "opsctl-wheels"
    assert wheels.cache_dir({"XDG_CACHE_HOME": "relative"}, root=False) == \
        home / ".cache" / "opsctl-wheels"
    named = {wheels.WHEEL_CACHE_ENV: str(tmp_path)}
    assert wheels.cache_dir(named, root=False) == wheels.cache_dir(named, root=True) == tmp_path


def test_a_failing_download_is_one_build_error_with_the_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[list[str]] = []

    def failing_pip(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution\n")

    monkeypatch.setattr(wheels.subprocess, "run", failing_pip)
    with pytest.raises(BuildError) as info:
        wheels.fetch("sglang", "0.5.23", tmp_path)
    assert info.value.exit_code == EXIT_BUILD
    assert (
        info.value.message == "pip download sglang==0.5.23 failed: ERROR: No matching distribution"
    )
    assert f"pip download --no-deps sglang==0.5.23 -d {tmp_path}" in info.value.hint
    assert commands[0][-1] == "sglang==0.5.23" and "--no-deps" in commands[0]


def test_sglang_args_extract_uses_the_wheel_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(wheels.WHEEL_CACHE_ENV, str(tmp_path))
    seen: list[Path] = []

    def stop(version: str, wheel_dir: Path, recorded: str | None = None) -> Path:
        seen.append(wheel_dir)
        raise BuildError("stop here")

    monkeypatch.setattr(extract, "ensure_wheel", stop)
    with pytest.raises(BuildError, match="stop here"):
        extract.extract("0.5.23", output=tmp_path / "cli-args.json")
    assert seen == [tmp_path]
