"""`opsctl render k8s` in a fresh process: the files written, the warning, a bad option."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opsctl.core.errors import EXIT_USAGE


def test_cli_writes_and_warns(opsctl: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = opsctl("render", "k8s", "--profile", "sim", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "NOT DEPLOYABLE" in done.stderr and "--router-image" in done.stderr
    assert len(done.stdout.splitlines()) == len(list(out.iterdir()))
    again = opsctl("render", "k8s", "--profile", "sim", "--out", str(out))
    assert again.returncode == EXIT_USAGE and "earlier render" in again.stderr
    bad = opsctl("render", "k8s", "--profile", "sim", "--out", str(tmp_path / "x"), "--replicas", "0")
    assert bad.returncode == EXIT_USAGE and not (tmp_path / "x").exists()
