"""Patch sets for pinned sglang releases: verify, apply with zero fuzz, and judge variants.

A patch set is `patches/sglang/<version>/`: `manifest.json`, unified diffs against the upstream
files, and new files (the kernel module, kept once in the repo under opsctl/kernels/). Applying
means: the tree's sglang version must match; every upstream file's sha256 must match the
manifest (a file already in its patched state is reported as "already applied"); GNU `patch`
runs with `--fuzz=0` and any offset, fuzz, reject or reversed hunk is an error; the patched
files and new files must then hash to the manifest's values. All of it happens in a temporary
copy; `apply` then installs the result atomically (`install`): a failure at any point leaves
the tree as it was, so running it again works.

Standard library only: the image build copies this file in and runs it with the image's python3
(`python3 patchset.py apply --site-packages DIR --patch-dir DIR`), where opsctl is not installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    from opsctl.config.patchsets import MANIFEST, patch_set_dir, read_manifest
    from opsctl.core.errors import PatchError, ProfileError
    from opsctl.core.paths import source_root
except ImportError:  # standalone inside the image build: same messages, plain exceptions

    class PatchError(Exception):  # type: ignore[no-redef]
        exit_code = 3

        def __init__(self, message: str, hint: str = "") -> None:
            super().__init__(message)
            self.message = message
            self.hint = hint

    class ProfileError(PatchError):  # type: ignore[no-redef]
        exit_code = 2

    def source_root() -> Path:
        return Path(os.environ.get("OPSCTL_PROJECT_DIR", Path(__file__).resolve().parents[2]))

    MANIFEST = "manifest.json"

    def read_manifest(patch_dir: Path) -> dict[str, Any]:  # checked on the host before staging
        return dict(json.loads((patch_dir / MANIFEST).read_text()))


# Both spellings: setuptools-scm writes one, vcs-versioning (0.5.23) the same assignment.
_VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


@dataclasses.dataclass(frozen=True)
class FileResult:
    path: str
    upstream_sha256: str
    patched_sha256: str


@dataclasses.dataclass(frozen=True)
class CheckReport:
    """What a check or apply did: the version, each patched file, each new file."""

    version: str
    patch_set_sha256: str
    patched: tuple[FileResult, ...]
    new_files: tuple[str, ...]
    tree: str

    def lines(self) -> list[str]:
        out = [f"sglang {self.version}: patch set {self.patch_set_sha256[:12]} applies cleanly "
               f"to {self.tree}"]
        out += [f"  patched {f.path} ({f.upstream_sha256[:12]} -> {f.patched_sha256[:12]})"
                for f in self.patched]
        out += [f"  added   {path}" for path in self.new_files]
        return out


# --- the patch set on disk ----------------------------------------------------------------------


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _new_file_source(patch_dir: Path, entry: dict[str, str]) -> Path:
    """New files name their source relative to the repository root, where the opsctl package is
    (the kernel lives once, in opsctl/kernels/)."""
    local = patch_dir / Path(entry["source"]).name
    if local.is_file():  # a patch set staged on its own (image build context)
        return local
    return source_root() / entry["source"]


def _patch_set_digest(patch_dir: Path, manifest: dict[str, Any]) -> str:
    digest = hashlib.sha256()

    def add(name: str, data: bytes) -> None:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)

    add(MANIFEST, (patch_dir / MANIFEST).read_bytes())
    for entry in manifest["files"]:
        add(entry["diff"], (patch_dir / entry["diff"]).read_bytes())
    for entry in manifest["new_files"]:
        add(entry["destination"], _new_file_source(patch_dir, entry).read_bytes())
    return digest.hexdigest()


def patch_set_sha256(version: str) -> str:
    """Hash over the manifest, the diffs and the new files: the build's image label."""
    patch_dir = patch_set_dir(version)
    return _patch_set_digest(patch_dir, read_manifest(patch_dir))


def patch_set_files(version: str) -> dict[str, Path]:
    """A patch set as the image build stages it: name -> source, new files beside the manifest.

    `apply --patch-dir` finds a new file beside the manifest first, so the staged set is
    self-contained inside the build context.
    """
    patch_dir = patch_set_dir(version)
    manifest = read_manifest(patch_dir)
    files = {MANIFEST: patch_dir / MANIFEST}
    files.update({entry["diff"]: patch_dir / entry["diff"] for entry in manifest["files"]})
    files.update({Path(entry["source"]).name: _new_file_source(patch_dir, entry)
                  for entry in manifest["new_files"]})
    return files


# --- reading an sglang tree ---------------------------------------------------------------------


def tree_version(src: Path) -> str | None:
    """The sglang version of a tree holding the `sglang` package (wheel dir or site-packages)."""
    version_file = src / "sglang" / "_version.py"
    try:
        if version_file.is_file():
            match = _VERSION_RE.search(version_file.read_text(errors="replace"))
            if match:
                return match.group(1)
        for meta in sorted(src.glob("sglang-*.dist-info/METADATA")):
            for line in meta.read_text(errors="replace").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    except OSError as exc:
        raise PatchError(f"cannot read {exc.filename or src}: {exc.strerror or exc}",
                         hint="make the sglang tree readable") from None
    return None


PATCH_TIMEOUT_S = 120.0  # GNU patch applies these diffs in milliseconds


def _run_patch(root: Path, diff: Path) -> None:
    """GNU patch, zero fuzz; any offset, fuzz, reject or reversal is a PatchError."""
    try:
        proc = subprocess.run(
            ["patch", "-p1", "--fuzz=0", "--forward", "--batch", "--no-backup-if-mismatch",
             "--reject-file=-", "-d", str(root), "-i", str(diff)],
            capture_output=True, text=True, check=False, timeout=PATCH_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise PatchError("GNU patch is not installed", hint="apt-get install patch") from None
    except subprocess.TimeoutExpired:
        raise PatchError(f"GNU patch did not finish {diff.name} within {PATCH_TIMEOUT_S:.0f} s",
                         hint="is `patch` on PATH GNU patch? (it applies a few hunks in "
                         "milliseconds)") from None
    output = proc.stdout + proc.stderr
    name = diff.name
    if "Reversed (or previously applied) patch detected" in output:
        raise PatchError(f"{name}: already applied (reversed hunks detected)",
                         hint="start from a clean upstream tree")
    failed = re.search(r"(\d+) out of (\d+) hunks? FAILED", output)
    if failed:
        raise PatchError(f"{name}: {failed.group(1)} of {failed.group(2)} hunks rejected",
                         hint="the upstream file differs from the one the diff was made against")
    fuzz = re.search(r"Hunk #(\d+) succeeded at (\d+) with fuzz (\d+)", output)
    if fuzz:
        raise PatchError(f"{name}: hunk #{fuzz.group(1)} needs fuzz {fuzz.group(3)}",
                         hint="zero fuzz is required; regenerate the diff")
    offset = re.search(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", output)
    if offset:
        raise PatchError(f"{name}: hunk #{offset.group(1)} applies only at offset "
                         f"{offset.group(3)} lines", hint="zero offset is required; regenerate "
                         "the diff against the pinned upstream file")
    if proc.returncode != 0:
        first = next((line for line in output.splitlines() if line.strip()), "no output")
        raise PatchError(f"{name}: patch failed (exit {proc.returncode}): {first}",
                         hint="the upstream file differs from the one the diff was made against")


def _stage(src: Path, patch_dir: Path, manifest: dict[str, Any], stage: Path) -> CheckReport:
    """Verify `src` and build the patched files under `stage` (mirrors site-packages paths)."""
    want = manifest["sglang_version"]
    if not (src / "sglang").is_dir():
        raise PatchError(f"{src} holds no sglang package",
                         hint="pass the directory that contains sglang/ (site-packages or wheel)")
    found = tree_version(src)
    if found is None:
        raise PatchError(f"{src}: cannot read the sglang version (sglang/_version.py)",
                         hint="pass an unpacked wheel or a site-packages directory")
    if found != want:
        raise PatchError(f"wrong sglang version: {src} has {found}, patch set is for {want}",
                         hint=f"use the patch set for {found}, or the sglang {want} tree")
    results = []
    for entry in manifest["files"]:
        rel = entry["path"]
        upstream = src / rel
        if not upstream.is_file():
            raise PatchError(f"{rel} is missing from {src}", hint="is this a complete sglang tree?")
        actual = _sha256_file(upstream)
        if actual == entry["patched_sha256"]:
            raise PatchError(f"{rel}: already applied (file has the patched sha256)",
                             hint="start from a clean upstream tree")
        if actual != entry["upstream_sha256"]:
            raise PatchError(f"{rel}: modified upstream file (sha256 {actual[:12]}, expected "
                             f"{entry['upstream_sha256'][:12]})",
                             hint="the tree is not the pristine sglang release")
        target = stage / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(upstream, target)
        _run_patch(stage, patch_dir / entry["diff"])
        patched = _sha256_file(target)
        if patched != entry["patched_sha256"]:
            raise PatchError(f"{rel}: patched sha256 {patched[:12]} != manifest "
                             f"{entry['patched_sha256'][:12]}", hint="the patch set is stale")
        try:
            py_compile.compile(str(target), cfile=str(target) + "c", doraise=True)
        except py_compile.PyCompileError as exc:
            raise PatchError(f"{rel}: patched file does not compile: {exc.msg}",
                             hint="fix the diff") from None
        os.unlink(str(target) + "c")
        results.append(FileResult(rel, actual, patched))
    added = []
    for entry in manifest["new_files"]:
        dest = entry["destination"]
        source = _new_file_source(patch_dir, entry)
        if (src / dest).exists():
            existing = _sha256_file(src / dest)
            what = "already applied" if existing == entry["sha256"] else "a different file"
            raise PatchError(f"{dest}: {what} exists in {src}", hint="start from a clean tree")
        digest = _sha256_file(source)
        if digest != entry["sha256"]:
            raise PatchError(f"{entry['source']}: sha256 {digest[:12]} != manifest "
                             f"{entry['sha256'][:12]}",
                             hint="the kernel changed: run `python3 -m opsctl.image.rehash`")
        target = stage / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        added.append(dest)
    return CheckReport(want, _patch_set_digest(patch_dir, manifest), tuple(results),
                       tuple(added), str(src))


def _stage_readable(src: Path, patch_dir: Path, manifest: dict[str, Any], stage: Path
                    ) -> CheckReport:
    """`_stage`, with a tree or patch set that cannot be read as one PatchError line."""
    try:
        return _stage(src, patch_dir, manifest, stage)
    except OSError as exc:
        raise PatchError(f"cannot read {exc.filename or src}: {exc.strerror or exc}",
                         hint="make the sglang tree and the patch set readable") from None


def check(sglang_src: Path, version: str) -> CheckReport:
    """Apply the patch set for `version` to a temporary copy of `sglang_src`'s files."""
    patch_dir = patch_set_dir(version)
    manifest = read_manifest(patch_dir)
    with tempfile.TemporaryDirectory(prefix="opsctl-patch-") as tmp:
        return _stage_readable(Path(sglang_src), patch_dir, manifest, Path(tmp))


def apply(site_packages: Path, patch_dir: Path) -> CheckReport:
    """The build path: verify and patch in a temporary copy, then install over `site_packages`."""
    manifest = read_manifest(Path(patch_dir))
    with tempfile.TemporaryDirectory(prefix="opsctl-patch-") as tmp:
        stage = Path(tmp)
        report = _stage_readable(Path(site_packages), Path(patch_dir), manifest, stage)
        install(
            Path(site_packages), stage, [f.path for f in report.patched], list(report.new_files)
        )
    return report


_NEW, _OLD = ".opsctl-new", ".opsctl-old"


def install(root: Path, stage: Path, replaced: list[str], added: list[str]) -> None:
    """Put `stage`'s files into `root` all or nothing.

    Each file is first written beside its target (same directory, so the rename is atomic),
    each target backed up (a hard link), then all are renamed into place; any error renames
    the backups back and removes what was added. A symlink on the way is refused: the patch
    writes only the tree it verified.
    """
    pairs = [(stage / rel, root / rel) for rel in [*replaced, *added]]
    for rel in [*replaced, *added]:
        _refuse_links(root, root / rel)
    staged: list[Path] = []
    backups: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    try:
        _stage_beside(pairs, staged)
        _back_up(root, replaced, backups)
        for (_, target), beside in zip(pairs, staged, strict=True):
            os.replace(beside, target)
            placed.append(target)
    except OSError as exc:
        _roll_back(backups, placed[len(replaced):], staged)
        raise PatchError(f"cannot write {exc.filename or root}: {exc.strerror or exc}; the tree "
                         "is unchanged", hint="make the tree writable, then apply again") from None
    for backup, _ in backups:
        backup.unlink()


def _refuse_links(root: Path, path: Path) -> None:
    """A symlink between `root` and `path` (or `path` itself) is refused."""
    for part in [path, *path.parents]:
        if part == root:
            return
        if part.is_symlink():
            raise PatchError(f"{part} is a symlink; refusing to write through it",
                             hint="patch a real sglang tree (a copy, not a link farm)")


def _stage_beside(pairs: list[tuple[Path, Path]], staged: list[Path]) -> None:
    """Each new file written beside its target (same directory: the rename is atomic)."""
    for source, target in pairs:
        beside = target.with_name(target.name + _NEW)
        beside.unlink(missing_ok=True)  # left by a run that was killed
        staged.append(beside)
        shutil.copyfile(source, beside)
        shutil.copymode(target if target.exists() else source, beside)


def _back_up(root: Path, replaced: list[str], backups: list[tuple[Path, Path]]) -> None:
    for rel in replaced:
        backup = (root / rel).with_name((root / rel).name + _OLD)
        backup.unlink(missing_ok=True)
        os.link(root / rel, backup)
        backups.append((backup, root / rel))


def _roll_back(backups: list[tuple[Path, Path]], added: list[Path], staged: list[Path]) -> None:
    for backup, target in backups:
        os.replace(backup, target)
        backup.unlink(missing_ok=True)  # still there when the target was never replaced
    for target in added:
        target.unlink(missing_ok=True)
    for beside in staged:
        beside.unlink(missing_ok=True)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="patchset.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_apply = sub.add_parser("apply", help="verify and apply a patch set in place (image build)")
    p_apply.add_argument("--site-packages", required=True, type=Path)
    p_apply.add_argument("--patch-dir", required=True, type=Path)
    p_check = sub.add_parser("check", help="verify a patch set against a tree, in a temp copy")
    p_check.add_argument("--sglang-src", required=True, type=Path)
    p_check.add_argument("--version", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "apply":
            report = apply(args.site_packages, args.patch_dir)
        else:
            report = check(args.sglang_src, args.version)
    except PatchError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 3))
    print("\n".join(report.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
