"""The folder `render k8s` writes: a Kustomize base operators keep, overlay and re-render.

`render k8s` never replaces the folder whole and never deletes a file it did not write. It keeps
a record, `.opsctl-render.json`, of every file it wrote with the sha256 of what it wrote. A
re-render then:

- replaces a recorded file whose content still matches the record (the file is still opsctl's);
- refuses a recorded file that was edited since (one line; `--force` overwrites it);
- deletes a recorded file the new render no longer has (only when unedited, or with `--force`);
- never touches a file the record does not name, and refuses to write over one (even with
  `--force`): a folder that holds files and no record is someone else's, refused as a whole.

Files are written one by one, each atomically. While they are, the record names both the old
and the new hash of each (`pending`), so a render interrupted half-way leaves a folder the next
render accepts as its own, not as edited.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsctl.core.errors import UsageError
from opsctl.core.files import atomic_write_text, read_bounded, sha256_file

RECORD = ".opsctl-render.json"
RECORD_FORMAT = "opsctl-render/1"
MAX_RECORD_BYTES = 1 << 20
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
EDIT_HINT = ("put the change in a Kustomize overlay of this folder (docs/kubernetes.md), or pass "
             "--force to overwrite it")


@dataclass(frozen=True)
class Record:
    files: dict[str, str]  # name -> sha256 of what `render k8s` wrote
    pending: dict[str, str] = field(default_factory=dict)  # a write under way: the new hashes

    def accepts(self, name: str, digest: str) -> bool:
        return digest in (self.files.get(name), self.pending.get(name))

    def names(self) -> set[str]:
        return set(self.files) | set(self.pending)


@dataclass(frozen=True)
class WritePlan:
    write: dict[str, str]  # name -> text
    delete: list[str]  # recorded files the new render no longer has
    record: Record | None  # the earlier render's (None: a new or empty folder)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_record(out: Path) -> Record | None:
    """The folder's record, None when it has none; UsageError when it is not one."""
    path = out / RECORD
    if not path.exists() and not path.is_symlink():
        return None
    try:
        raw = read_bounded(path, "the render record", MAX_RECORD_BYTES)
    except OSError as exc:
        raise _bad_record(out, exc.strerror or str(exc)) from None
    try:
        data = json.loads(raw)
    except ValueError as exc:  # not UTF-8, not JSON, an integer past int()'s digit limit
        raise _bad_record(out, f"not JSON ({str(exc).split(';')[0]})") from None
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        raise _bad_record(out, f"not a {RECORD_FORMAT} record")
    return Record(files=_hashes(out, data.get("files")), pending=_hashes(out, data.get("pending", {})))


def _hashes(out: Path, found: Any) -> dict[str, str]:
    if not isinstance(found, dict):
        raise _bad_record(out, "its files are not a mapping")
    for name, digest in found.items():
        # a record names plain files of this folder only: never a path elsewhere
        if not (isinstance(name, str) and _PLAIN_NAME.fullmatch(name) and name != RECORD):
            raise _bad_record(out, f"it names {name!r}, not a file of this folder")
        if not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
            raise _bad_record(out, f"{name}: {digest!r} is not a sha256")
    return dict(found)


def _bad_record(out: Path, why: str) -> UsageError:
    return UsageError(f"--out {out}: {RECORD} is not a record of `render k8s`: {why}",
                      hint="choose another directory; delete that file only if the folder "
                           "holds nothing but an earlier render")


def check_folder(out: Path) -> Record | None:
    """The record of the render `out` holds (None: `out` is new or empty); UsageError (exit 2)
    when `out` holds files and no record: someone else's folder, never written into."""
    if not out.is_dir():
        return None
    record = read_record(out)
    present = sorted(entry.name for entry in out.iterdir())
    if record is None and present:
        raise UsageError(f"--out {out} holds files `render k8s` did not write ({present[0]}) "
                         f"and no {RECORD}", hint="choose an empty or new directory (a render "
                         "of an older opsctl: delete it and render again)")
    return record


def plan_write(out: Path, files: dict[str, str], force: bool) -> WritePlan:
    """What to write and delete in `out`, or a UsageError (exit 2) before anything changes."""
    record = check_folder(out)
    if record is None:
        return WritePlan(write=files, delete=[], record=None)
    for name in sorted(set(files) - record.names()):
        if (out / name).exists() or (out / name).is_symlink():
            raise UsageError(f"--out {out}: {name} is there and `render k8s` did not write it; "
                             "it is never replaced", hint="move it away, or choose another "
                                                          "directory")
    edited = [name for name in sorted(record.names()) if _edited(out, name, record)]
    if edited and not force:
        raise UsageError(f"--out {out}: {edited[0]} was edited since `render k8s` wrote it"
                         + (f" (and {len(edited) - 1} more)" if len(edited) > 1 else ""),
                         hint=EDIT_HINT)
    stale = [name for name in sorted(record.names() - set(files)) if (out / name).exists()]
    return WritePlan(write=files, delete=stale, record=record)


def _edited(out: Path, name: str, record: Record) -> bool:
    path = out / name
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise UsageError(f"--out {out}: {name} is no longer a regular file",
                         hint="move it away; `render k8s` writes regular files only")
    return path.exists() and not record.accepts(name, sha256_file(path))


def write(out: Path, plan: WritePlan) -> list[Path]:
    """Carry out `plan`: the record first (old and new hashes), the files, the deletions, then
    the record of this render alone."""
    out.mkdir(parents=True, exist_ok=True)
    new = {name: sha256_text(text) for name, text in plan.write.items()}
    earlier = plan.record.files if plan.record else {}
    _write_record(out, Record(files=earlier, pending=new))
    written = [atomic_write_text(out / name, text, scrub=False)
               for name, text in plan.write.items()]
    for name in plan.delete:
        (out / name).unlink(missing_ok=True)
    _write_record(out, Record(files=new))
    return written


def _write_record(out: Path, record: Record) -> None:
    data: dict[str, Any] = {"format": RECORD_FORMAT,
                            "note": "the files `opsctl render k8s` wrote here, by sha256; a "
                                    "re-render replaces only these, and refuses edited ones",
                            "files": dict(sorted(record.files.items()))}
    if record.pending:
        data["pending"] = dict(sorted(record.pending.items()))
    atomic_write_text(out / RECORD, json.dumps(data, indent=1) + "\n", scrub=False)
