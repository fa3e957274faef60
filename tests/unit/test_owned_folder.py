"""Writes inside a folder opsctl owns never follow a link out of it, and touch only opsctl's
files (core.files.OwnedFolder; issue 37, items 2 and 7)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from opsctl.core.errors import UsageError
from opsctl.core.files import OwnedFolder

MARK = "# made-by-test"


def folder(root: Path) -> OwnedFolder:
    return OwnedFolder(root, MARK, "--out")


def test_a_new_file_is_written_with_its_folders(tmp_path: Path) -> None:
    path = folder(tmp_path / "out").write("a/b/c.yml", f"{MARK}\nx: 1\n")
    assert path.read_text() == f"{MARK}\nx: 1\n"
    assert folder(tmp_path / "out").inspect("a/b/c.yml").marked  # type: ignore[union-attr]


def test_its_own_file_is_replaced_an_operators_only_with_force(tmp_path: Path) -> None:
    owned = folder(tmp_path)
    (tmp_path / "mine.yml").write_text("operator: 1\n")
    with pytest.raises(UsageError, match="mine.yml is there and opsctl did not write it"):
        owned.write("mine.yml", f"{MARK}\n")
    assert (tmp_path / "mine.yml").read_text() == "operator: 1\n"
    owned.write("mine.yml", f"{MARK}\nnew\n", force=True)
    owned.write("mine.yml", f"{MARK}\nnewer\n")  # now opsctl's: replaced without --force
    assert (tmp_path / "mine.yml").read_text() == f"{MARK}\nnewer\n"


def test_a_file_without_the_marker_is_never_deleted(tmp_path: Path) -> None:
    (tmp_path / "mine.yml").write_text("operator: 1\n")
    with pytest.raises(UsageError, match="never deletes it"):
        folder(tmp_path).delete("mine.yml")
    assert (tmp_path / "mine.yml").exists()
    (tmp_path / "ours.yml").write_text(f"{MARK}\n")
    folder(tmp_path).delete("ours.yml")
    assert not (tmp_path / "ours.yml").exists()


@pytest.mark.parametrize("force", [False, True])
def test_a_linked_file_is_neither_written_nor_deleted_through(force: bool, tmp_path: Path) -> None:
    outside = tmp_path / "outside.yml"
    outside.write_text(f"{MARK}\noperator\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "x.yml").symlink_to(outside)
    with pytest.raises(UsageError, match="x.yml is a symbolic link"):
        folder(root).write("x.yml", f"{MARK}\nnew\n", force=force)
    with pytest.raises(UsageError, match="x.yml is a symbolic link"):
        folder(root).delete("x.yml")
    assert outside.read_text() == f"{MARK}\noperator\n"
    assert (root / "x.yml").is_symlink()


def test_a_linked_folder_is_not_written_into(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "prometheus.yml").write_text(f"{MARK}\noperator's\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "prometheus").symlink_to(elsewhere)
    with pytest.raises(UsageError, match="prometheus is a symbolic link, not a directory"):
        folder(root).write("prometheus/prometheus.yml", f"{MARK}\n", force=True)
    assert (elsewhere / "prometheus.yml").read_text() == f"{MARK}\noperator's\n"
    assert sorted(os.listdir(elsewhere)) == ["prometheus.yml"]


def test_modes_are_never_set_through_a_link(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("pw\n")
    secret.chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    root = tmp_path / "root"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "password").symlink_to(secret)
    (root / "linked").symlink_to(shared)
    with pytest.raises(UsageError, match="password is a symbolic link"):
        folder(root).keep_file("secrets/password", lambda: "new\n", 0o644)
    with pytest.raises(UsageError, match="linked is a symbolic link"):
        folder(root).ensure_dir("linked", 0o700)
    assert secret.stat().st_mode & 0o777 == 0o600
    assert shared.stat().st_mode & 0o777 == 0o755


def test_a_kept_file_is_made_once_and_set_to_its_mode(tmp_path: Path) -> None:
    path = folder(tmp_path).keep_file("s/p", lambda: "first\n", 0o640)
    assert folder(tmp_path).keep_file("s/p", lambda: "second\n", 0o644) == path
    assert path.read_text() == "first\n" and path.stat().st_mode & 0o777 == 0o644


def test_a_kept_file_whose_making_failed_is_not_kept_empty(tmp_path: Path) -> None:
    """A Ctrl-C (or a full disk) while the Grafana password is made: the next run makes it
    again, never keeps an empty password."""
    def interrupted() -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        folder(tmp_path).keep_file("s/p", interrupted, 0o600)
    path = folder(tmp_path).keep_file("s/p", lambda: "second\n", 0o600)
    assert path.read_text() == "second\n"
    assert sorted(os.listdir(tmp_path / "s")) == ["p"]  # no temporary file left either


def test_a_refusal_says_what_opsctl_writes_there(tmp_path: Path) -> None:
    (tmp_path / "linked").symlink_to(tmp_path)
    with pytest.raises(UsageError) as caught:
        folder(tmp_path).write("linked/x.yml", MARK)
    assert caught.value.hint == "move it away; opsctl writes a directory of its own there"


@pytest.mark.parametrize("relative", ["../x", "/etc/x", "a/../../x", "a//b", "."])
def test_a_path_outside_the_folder_is_a_bug(relative: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a path inside the folder"):
        folder(tmp_path).write(relative, MARK)


def test_a_folder_opsctl_may_not_enter_is_said_as_such(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A sub-folder without search permission (EACCES; root is never refused, so faked here):
    the OS's reason with the path, not 'prometheus is a directory, not a directory'."""
    (tmp_path / "prometheus").mkdir()
    real_open = os.open

    def denied(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if path == "prometheus":
            raise PermissionError(13, "Permission denied", "prometheus")
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(PermissionError) as caught:
        folder(tmp_path).write("prometheus/prometheus.yml", MARK)
    assert caught.value.filename == str(tmp_path / "prometheus")
