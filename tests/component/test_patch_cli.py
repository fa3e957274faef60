"""`opsctl patch check|apply` end to end: exit codes and one-line errors, no tracebacks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opsctl.core import wheels
from opsctl.image import upstream


def opsctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True,
                          text=True, check=False)


@pytest.fixture(scope="module")
def tree_059(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("sglang-0.5.15")
    return upstream.unpack_wheel(wheels.fetch("sglang", "0.5.15"), dest,
                                 upstream.members_for("0.5.15"))


def test_check_by_release_downloads_and_applies() -> None:
    run = opsctl("patch", "check", "--sglang-version", "0.5.23")
    assert run.returncode == 0, run.stderr
    assert "sglang 0.5.23: patch set" in run.stdout
    assert "applies cleanly" in run.stdout


def test_check_by_directory(tree_059: Path) -> None:
    run = opsctl("patch", "check", "--sglang-src", str(tree_059))
    assert run.returncode == 0, run.stderr
    assert "patched sglang/srt/layers/attention/flashinfer_mla_backend.py" in run.stdout


def test_wrong_version_is_a_build_error_in_one_line(tree_059: Path) -> None:
    run = opsctl("patch", "check", "--sglang-src", str(tree_059), "--version", "0.5.23")
    assert run.returncode == 3
    assert "wrong sglang version" in run.stderr
    assert "Traceback" not in run.stderr


def test_exactly_one_source_is_required() -> None:
    run = opsctl("patch", "check")
    assert run.returncode == 2
    assert "exactly one of --sglang-src" in run.stderr


def test_apply_then_apply_again(tree_059: Path, tmp_path: Path) -> None:
    tree = tmp_path / "site"
    shutil.copytree(tree_059, tree)
    first = opsctl("patch", "apply", "--sglang-src", str(tree))
    assert first.returncode == 0, first.stderr
    assert (tree / "sglang/srt/layers/attention/opsctl_kv_gather_cast.py").is_file()
    second = opsctl("patch", "apply", "--sglang-src", str(tree))
    assert second.returncode == 3
    assert "already applied" in second.stderr
