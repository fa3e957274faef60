"""Writing files so that a reader never sees half of one (write beside, then rename into place),
and hashing them.

An output goes only to a regular file or a new path: the rename would replace whatever sits at
the target, so a FIFO, a socket, a device node (`--json /dev/full`) or a directory there is
refused with a UsageError (exit 2) by `check_output_path` before the work and again by every
writer here right before its rename.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from opsctl.core.errors import UsageError
from opsctl.core.redact import redact


def atomic_write_text(path: Path, text: str, *, scrub: bool = True) -> Path:
    """Write `text` to `path` atomically (same-directory temp file + os.replace); return `path`.

    The text is `redact`ed first (URL userinfo, echoed credentials, the API key), so no report
    or state file holds a secret whatever its writer forgot; `scrub=False` only for a config
    a service must read as rendered (the monitoring stack's). The temp file is removed if
    anything fails, so no `.tmp` is left behind.
    """
    refuse_non_regular(path)
    if scrub:
        text = redact(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _beside(path)
    try:
        tmp.write_text(text)
        refuse_non_regular(path)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_chunks(path: Path, chunks: Iterable[bytes]) -> Path:
    """Like `atomic_write_text`, for bytes that arrive in pieces (a container's log): only the
    chunk in hand is in memory; `path` appears whole or not at all, also when the source fails
    (its exception propagates, the temp file is removed)."""
    refuse_non_regular(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _beside(path)
    try:
        with tmp.open("wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        refuse_non_regular(path)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_dir(path: Path, files: dict[str, str]) -> list[Path]:
    """Make `path` a directory holding exactly `files` (relative name -> text), all at once.

    The files are written into a sibling directory first and renamed into place: a reader sees
    the old directory or the new one, never part of either, and nothing is left behind when a
    write fails. A directory already at `path` is replaced whole; the caller decides whether
    it may be; anything else at `path` (a file, a FIFO, a device) is refused, never moved aside.
    """
    refuse_non_regular(path, directory=True)
    parent = path.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    stage, old = _beside(path), path.with_name(f".{path.name}.{os.getpid()}.old")
    try:
        stage.mkdir()
        for relative, text in files.items():
            (stage / relative).write_text(text)
        refuse_non_regular(path, directory=True)
        if path.exists():
            os.rename(path, old)
            try:
                os.rename(stage, path)
            except OSError:
                os.rename(old, path)
                raise
        else:
            os.rename(stage, path)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return [path / relative for relative in files]


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """`atomic_write_chunks` for bytes already in hand."""
    return atomic_write_chunks(path, [data])


def node_kind(mode: int) -> str:
    """What a stat mode names, as an error says it: "a FIFO", "a character device", ..."""
    kinds = ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def refuse_non_regular(path: Path, option: str = "output", *, directory: bool = False) -> None:
    """UsageError (exit 2) unless `path` is new, a regular file (a directory when `directory`),
    or a link to one: what the atomic rename may replace without destroying something else."""
    try:
        mode = os.stat(path).st_mode  # through a link: a link to /dev/null is refused too
    except FileNotFoundError:
        return  # a new path (or a dangling link, which the rename replaces)
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror or exc}",
                         hint="choose a path opsctl can reach") from None
    if (stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)):
        return
    wanted = "a directory" if directory else "a regular file or a new path"
    raise UsageError(f"{option} {path}: is {node_kind(mode)}, not {wanted}",
                     hint=f"name {wanted}; opsctl never writes over "
                          f"{'anything else' if directory else 'a device, FIFO, socket or directory'}")


def _beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in blocks (wheels run to hundreds of MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_output_path(path: Path, option: str, *, directory: bool = False) -> Path:
    """`path` when opsctl can write its output there (a file, or a directory when `directory`);
    UsageError (exit 2) otherwise, so a command fails before its work, never after a long run.

    Refused: an existing directory where a file is wanted (or the reverse), a FIFO, socket or
    device node (`refuse_non_regular`), a path that cannot be written, a parent that is a file,
    and a nearest existing parent opsctl cannot create files in (the atomic write puts its
    temporary file beside the target).
    """
    try:
        return _check_output_path(path, option, directory)
    except OSError as exc:  # a parent that cannot be searched
        raise UsageError(f"{option} {path}: {exc.strerror or exc}",
                         hint="choose a path opsctl can reach") from None


def _check_output_path(path: Path, option: str, directory: bool) -> Path:
    wanted, other = ("a directory", "a file") if directory else ("a file", "a directory")
    target = path.absolute()
    if target.exists():
        if target.is_dir() != directory and (target.is_dir() or target.is_file()):
            raise UsageError(f"{option} {path}: is {other}; {wanted} is wanted",
                             hint=f"name {wanted} to write")
        refuse_non_regular(target, option, directory=directory)
        if not os.access(target, os.W_OK | (os.X_OK if directory else 0)):
            raise UsageError(f"{option} {path}: not writable", hint="choose a writable path")
        if directory:
            return path
    ancestor = next(parent for parent in target.parents if parent.exists())
    if not ancestor.is_dir():
        raise UsageError(f"{option} {path}: {ancestor} is a file, not a directory",
                         hint="choose a path under a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: cannot create files in {ancestor}",
                         hint="choose a writable directory")
    return path


def open_regular(path: Path, what: str) -> BinaryIO:
    """The file a user named, opened for reading without blocking: O_NONBLOCK (a FIFO opens at
    once instead of waiting for a writer), then refused unless it is a regular file (a FIFO, a
    device such as /dev/zero, a socket or a directory: UsageError, exit 2, one line). OSError
    (missing, unreadable) propagates for the caller's own wording."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    handle = os.fdopen(fd, "rb")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        handle.close()
        raise UsageError(f"{what} {path}: is {node_kind(mode)}, not a regular file",
                         hint="name a regular file")
    return handle


def read_bounded(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file (`open_regular`), the cap checked while reading, not by a
    `stat` that a growing file outlives: larger than `max_bytes` is UsageError (exit 2)."""
    with open_regular(path, what) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UsageError(f"{what} {path}: larger than {_size(max_bytes)}",
                         hint=f"name a file of at most {_size(max_bytes)}")
    return data


def _size(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 and count % (1 << 20) == 0 else f"{count} bytes"
