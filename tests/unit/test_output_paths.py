"""Output paths: opsctl writes only to a regular file or a new path (issue 25, defect H1).

The atomic write renames a temporary file over its target, which replaced a FIFO or a device
node (`verify --json /dev/full` turned /dev/full into a regular file). Every node here is
created in a temporary directory: no test writes to, or near, the real /dev.
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from opsctl.core.errors import EXIT_USAGE, UsageError
from opsctl.core.files import (
    atomic_write_chunks,
    atomic_write_dir,
    atomic_write_text,
    check_output_path,
)


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "a-fifo"
    os.mkfifo(path)
    return path


def _char_device(tmp_path: Path) -> Path:
    """A private copy of /dev/null's device number (1, 3) in tmp: a char device nobody reads."""
    path = tmp_path / "a-device"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD)")
    return path


def _socket(tmp_path: Path) -> Path:
    path = tmp_path / "a-socket"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    return path


def _symlink_to_fifo(tmp_path: Path) -> Path:
    link = tmp_path / "a-link"
    link.symlink_to(_fifo(tmp_path))
    return link


SPECIAL = {"fifo": _fifo, "char-device": _char_device, "socket": _socket,
           "symlink-to-fifo": _symlink_to_fifo}


def _kind(path: Path) -> int:
    return stat.S_IFMT(os.lstat(path).st_mode)


@pytest.mark.parametrize("kind", SPECIAL)
def test_check_output_path_refuses_a_node_that_is_not_a_regular_file(kind: str,
                                                                    tmp_path: Path) -> None:
    target = SPECIAL[kind](tmp_path)
    with pytest.raises(UsageError) as caught:
        check_output_path(target, "--json")
    assert caught.value.exit_code == EXIT_USAGE
    assert "--json" in caught.value.message and "\n" not in caught.value.message
    assert "regular file" in caught.value.message


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("writer", ["text", "chunks"])
def test_atomic_write_never_renames_over_a_node_that_is_not_a_regular_file(
        kind: str, writer: str, tmp_path: Path) -> None:
    target = SPECIAL[kind](tmp_path)
    before = _kind(target)
    with pytest.raises(UsageError):
        if writer == "text":
            atomic_write_text(target, "{}\n")
        else:
            atomic_write_chunks(target, [b"{}\n"])
    assert _kind(target) == before  # still the FIFO, device, socket or link it was
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


@pytest.mark.parametrize("kind", SPECIAL)
def test_atomic_write_dir_never_moves_a_node_aside(kind: str, tmp_path: Path) -> None:
    target = SPECIAL[kind](tmp_path)
    before = _kind(target)
    with pytest.raises(UsageError):
        atomic_write_dir(target, {"a.yaml": "x: 1\n"})
    assert _kind(target) == before


def test_a_regular_file_and_a_new_path_are_still_written(tmp_path: Path) -> None:
    existing = tmp_path / "old.json"
    existing.write_text("old")
    assert check_output_path(existing, "--json") == existing
    atomic_write_text(existing, "new")
    assert existing.read_text() == "new"
    fresh = tmp_path / "sub" / "new.json"
    assert check_output_path(fresh, "--json") == fresh
    atomic_write_text(fresh, "x")
    assert fresh.read_text() == "x"
