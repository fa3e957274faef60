"""core/paths: which layout opsctl runs from, and what an installed opsctl never writes into."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opsctl.core import paths
from opsctl.core.errors import EXIT_USAGE, UsageError
from opsctl.image import lock
from opsctl.image.lock import BaseResolution

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkout_is_found_beside_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(paths.PROJECT_DIR_ENV, raising=False)
    assert paths.layout() == paths.Layout(paths.CHECKOUT, ROOT, ROOT)
    assert not paths.is_installed()
    paths.require_checkout("a rewrite")  # allowed


def test_the_project_dir_names_data_and_sources(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(paths.PROJECT_DIR_ENV, str(tmp_path))
    assert paths.layout() == paths.Layout(paths.PROJECT_COPY, tmp_path, tmp_path)
    assert paths.project_root() == paths.source_root() == tmp_path


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    data = tmp_path / "site" / "opsctl" / paths.DATA_DIR
    (data / "deploy" / "locks").mkdir(parents=True)
    monkeypatch.delenv(paths.PROJECT_DIR_ENV, raising=False)
    monkeypatch.delenv(lock.LOCK_DIR_ENV, raising=False)
    monkeypatch.setenv("OPSCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(
        paths, "_found", lambda: paths.Layout(paths.INSTALLED, data, data.parents[1])
    )
    return data


def test_installed_maintainer_rewrites_are_refused(installed: Path) -> None:
    with pytest.raises(UsageError) as refused:
        paths.require_checkout("profile resolve --write-records")
    assert refused.value.exit_code == EXIT_USAGE
    assert "installed package" in refused.value.message and str(installed) in refused.value.message
    assert "checkout" in refused.value.hint


def test_installed_locks_go_to_the_state_dir_and_start_from_the_packaged_one(
    installed: Path, tmp_path: Path
) -> None:
    packaged = installed / "deploy" / "locks" / "p.json"
    committed = {"a:1": {"digest": "sha256:" + "1" * 64, "kind": "repo-digest"}}
    packaged.write_text(json.dumps({"bases": committed}))
    before = packaged.read_text()
    path = lock.lock_dir() / "p.json"
    assert path == tmp_path / "state" / "locks" / "p.json"
    assert lock.read_lock(path) == committed
    lock.write_lock(path, "p", BaseResolution("b:2", "b@sha256:" + "2" * 64, "sha256:" + "2" * 64,
                                              "repo-digest"))
    assert set(json.loads(path.read_text())["bases"]) == {"a:1", "b:2"}
    assert packaged.read_text() == before
    assert lock.read_lock(lock.lock_dir() / "other.json") == {}
