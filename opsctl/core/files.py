"""Writing files so that a reader never sees half of one (write beside, then rename into place),
and hashing them.

An output goes only to a regular file or a new path: the rename would replace whatever sits at
the target, so a FIFO, a socket, a device node (`--json /dev/full`) or a directory there is
refused with a UsageError (exit 2) by `check_output_path` before the work and again by every
writer here right before its rename.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
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
    raise UsageError(
        f"{option} {path}: is {node_kind(mode)}, not {wanted}",
        hint=f"name {wanted}; opsctl never writes over "
        f"{'anything else' if directory else 'a device, FIFO, socket or directory'}",
    )


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


# --- a folder opsctl owns --------------------------------------------------------------------

# A file carries its writer's marker in its first this many bytes (a comment header, or a
# JSON file's description): how a folder tells its writer's files from an operator's.
MARKER_WINDOW = 8 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Found:
    """A regular file of an owned folder: its sha256, and whether it carries the marker."""

    sha256: str
    marked: bool


@dataclass(frozen=True)
class OwnedFolder:
    """A folder of files opsctl writes (`monitor up`'s config dir, `monitor compose`'s,
    `render k8s --out`): every change inside it stays inside it, and touches only opsctl's files.

    - No link is followed below `root`: a path whose folder, or which itself, is a symbolic
      link is refused (UsageError, exit 2), never written, replaced, chmod-ed or deleted
      through. Each step opens the next folder relative to the one before, with O_NOFOLLOW,
      so a link swapped in between a check and a write is refused too. `root` itself is
      the folder the user named, and may be a link.
    - A file is opsctl's when it carries `marker` in its first MARKER_WINDOW bytes. Another
      file is replaced only with `force`, and deleted never.
    - Writes are atomic (a temporary file beside the target, renamed onto it).
    """

    root: Path
    marker: str
    option: str  # how the user named `root`: "--out", "--config-dir"

    def inspect(self, relative: str) -> Found | None:
        """The file at `relative` (None: no file there); UsageError for a link or a node
        other than a regular file."""
        with self._parent(relative, create=False) as (folder, name):
            if folder is None:
                return None
            fd = self._open_file(folder, relative, name)
            if fd is None:
                return None
            with os.fdopen(fd, "rb") as handle:
                head = handle.read(MARKER_WINDOW)
                digest = hashlib.sha256(head)
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            return Found(digest.hexdigest(), self.marker.encode() in head)

    def check_write(self, relative: str, *, force: bool = False) -> None:
        """UsageError unless `write(relative, ..., force=force)` may go ahead."""
        found = self.inspect(relative)
        if found and not found.marked and not force:
            raise UsageError(f"{self.option} {self.root}: {relative} is there and opsctl did not "
                             f"write it (it lacks {self.marker!r})",
                             hint="move it away or choose another folder; --force overwrites it")

    def write(self, relative: str, text: str, *, force: bool = False, scrub: bool = True) -> Path:
        """Write `text` to `relative` atomically (`atomic_write_text`'s scrub), creating its
        folders (0755 less the umask); refused as `check_write` says."""
        if scrub:
            text = redact(text)
        with self._parent(relative, create=True) as (folder, name):
            assert folder is not None
            self._check_replace(folder, relative, name, force)
            tmp = f".{name}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o666, dir_fd=folder)
            try:
                with os.fdopen(fd, "w") as handle:
                    handle.write(text)
                self._check_replace(folder, relative, name, force)
                os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=folder)
        return self.root / relative

    def delete(self, relative: str) -> None:
        """Remove opsctl's file at `relative` (nothing there: nothing to do); a file without
        the marker is never deleted (UsageError)."""
        found = self.inspect(relative)
        if found is None:
            return
        if not found.marked:
            raise UsageError(f"{self.option} {self.root}: {relative} lacks {self.marker!r}: "
                             "opsctl did not write it and never deletes it",
                             hint="move it away yourself if it should go")
        with self._parent(relative, create=False) as (folder, name):
            assert folder is not None
            os.unlink(name, dir_fd=folder)

    def ensure_dir(self, relative: str, mode: int) -> Path:
        """The folder `relative`, created when missing and set to `mode` (through its own
        descriptor: a link there is refused, never followed)."""
        with self._folder(_inside(relative), create=True) as folder:
            assert folder is not None
            os.fchmod(folder, mode)
        return self.root / relative

    def keep_file(self, relative: str, create: Callable[[], str], mode: int) -> Path:
        """A file made once (`create()`'s text) and kept afterwards, set to `mode`: a link
        there is refused, never chmod-ed through."""
        with self._parent(relative, create=True) as (folder, name):
            assert folder is not None
            fd = self._open_file(folder, relative, name)
            if fd is None:
                self._make_once(folder, name, create().encode(), mode)
                fd = self._open_file(folder, relative, name)
                assert fd is not None
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        return self.root / relative

    @staticmethod
    def _make_once(folder: int, name: str, data: bytes, mode: int) -> None:
        """`name` holding `data` whole, or nothing there (a Ctrl-C or a full disk midway never
        leaves a file that is then kept): written beside it, then linked in unless a
        concurrent run made it first."""
        tmp = f".{name}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)

    # -- the walk ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _parent(self, relative: str, *, create: bool) -> Iterator[tuple[int | None, str]]:
        """The descriptor of `relative`'s folder (None: missing and not created) and its name."""
        parts = _inside(relative)
        with self._folder(parts[:-1], create=create) as folder:
            yield folder, parts[-1]

    @contextlib.contextmanager
    def _folder(self, parts: list[str], *, create: bool) -> Iterator[int | None]:
        """The descriptor of the folder `parts` below `root`, each step without following a
        link (None: missing and not created)."""
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        try:
            folder: int | None = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            folder = None
        try:
            for index, part in enumerate(parts):
                if folder is None:
                    break
                parent, folder = folder, None  # `_step` closes it, also when it raises
                folder = self._step(parent, "/".join(parts[:index + 1]), part, create)
            yield folder
        finally:
            if folder is not None:
                os.close(folder)

    def _step(self, folder: int, shown: str, part: str, create: bool) -> int | None:
        """Open `part` under `folder` (closed here), never through a link."""
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=folder)
            return os.open(part, _DIR_FLAGS, dir_fd=folder)
        except FileNotFoundError:
            return None
        except OSError as exc:
            mode = os.stat(part, dir_fd=folder, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):  # a folder it may not enter: the OS's reason, with its path
                raise type(exc)(exc.errno, exc.strerror, str(self.root / shown)) from None
            raise self._refused(shown, mode, "a directory") from None
        finally:
            os.close(folder)

    def _open_file(self, folder: int, relative: str, name: str) -> int | None:
        """A read descriptor of the regular file `name` (None: nothing there)."""
        try:
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(mode):
            raise self._refused(relative, mode, "a regular file")
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=folder)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat
            os.close(fd)
            raise self._refused(relative, mode, "a regular file")
        return fd

    def _check_replace(self, folder: int, relative: str, name: str, force: bool) -> None:
        fd = self._open_file(folder, relative, name)
        if fd is None:
            return
        with os.fdopen(fd, "rb") as handle:
            marked = self.marker.encode() in handle.read(MARKER_WINDOW)
        if not marked and not force:
            self.check_write(relative, force=force)  # the one wording of the refusal

    def _refused(self, relative: str, mode: int, wanted: str) -> UsageError:
        what = "a symbolic link" if stat.S_ISLNK(mode) else node_kind(mode)
        return UsageError(f"{self.option} {self.root}: {relative} is {what}, not {wanted}; "
                          "opsctl never writes through one",
                          hint=f"move it away; opsctl writes {wanted} of its own there")


def _inside(relative: str) -> list[str]:
    """The names of a relative path that stays inside its folder (a bug otherwise)."""
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{relative!r} is not a path inside the folder")
    return parts
