"""`opsctl patch apply` is all or nothing, on real sglang 0.5.15 trees.

A failure at any point (a folder that cannot be written, the new kernel file failing to write,
a rename failing half way) leaves every file as it was and no temporary file behind, and
running apply again afterwards works. A symlink where the patch would write is refused, and an
unreadable tree is one line, exit 3.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from unprivileged import without_dac_override

from opsctl.config import patchsets
from opsctl.core import wheels
from opsctl.core.errors import PatchError
from opsctl.image import patchset, upstream

VERSION = "0.5.15"
MANIFEST = patchsets.load_manifest(VERSION)
BACKEND = MANIFEST["files"][0]["path"]
KERNEL = MANIFEST["new_files"][0]["destination"]


def opsctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, preexec_fn=without_dac_override)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("sglang-0.5.15")
    return upstream.unpack_wheel(
        wheels.fetch("sglang", VERSION), dest, upstream.members_for(VERSION)
    )


@pytest.fixture
def tree(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "site"
    shutil.copytree(pristine, copy)
    return copy


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under `root`: file contents by hash, links by target, folders by mode."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = "-> " + os.readlink(path)
        elif path.is_dir():
            found[rel] = oct(path.stat().st_mode)
        else:
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def failed_one_line(run: subprocess.CompletedProcess[str], says: str) -> None:
    assert run.returncode == 3, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], run.stderr


def apply(tree: Path) -> subprocess.CompletedProcess[str]:
    return opsctl("patch", "apply", "--sglang-src", str(tree))


def test_an_unwritable_folder_changes_nothing_and_apply_works_after(tree: Path) -> None:
    folder = (tree / BACKEND).parent
    folder.chmod(0o555)
    before = snapshot(tree)
    try:
        failed_one_line(apply(tree), "the tree is unchanged")
        assert snapshot(tree) == before
    finally:
        folder.chmod(0o755)
    done = apply(tree)
    assert done.returncode == 0, done.stderr
    assert (tree / KERNEL).is_file()
    assert not [p for p in folder.iterdir() if p.name.endswith((".opsctl-new", ".opsctl-old"))]


@pytest.mark.parametrize("how", ["dangling-kernel-link", "kernel-link-to-file", "backend-link",
                                 "folder-link"])
def test_a_symlink_where_the_patch_writes_is_refused(tree: Path, tmp_path: Path, how: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    if how == "dangling-kernel-link":
        (tree / KERNEL).symlink_to(outside / "planted.py")
    elif how == "kernel-link-to-file":
        (outside / "victim.py").write_text("victim\n")
        (tree / KERNEL).symlink_to(outside / "victim.py")
    elif how == "backend-link":
        shutil.move(tree / BACKEND, outside / "backend.py")
        (tree / BACKEND).symlink_to(outside / "backend.py")
    else:
        folder = (tree / BACKEND).parent
        shutil.move(folder, outside / "attention")
        folder.symlink_to(outside / "attention")
    before, outside_before = snapshot(tree), snapshot(outside)
    run = apply(tree)
    assert run.returncode == 3, run.stderr
    assert "symlink" in run.stderr or "exists" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert snapshot(tree) == before and snapshot(outside) == outside_before


@pytest.mark.parametrize("what", [BACKEND, "sglang/_version.py"])
def test_an_unreadable_tree_is_one_line_exit_3(tree: Path, what: str) -> None:
    (tree / what).chmod(0o000)
    failed_one_line(apply(tree), "")
    failed_one_line(opsctl("patch", "check", "--sglang-src", str(tree), "--version", VERSION), "")


def test_an_unreadable_tree_says_which_file(tree: Path) -> None:
    (tree / BACKEND).chmod(0o000)
    failed_one_line(apply(tree), f"cannot read {tree / BACKEND}: Permission denied")


# --- in process: failures at the exact moments a real disk cannot be made to fail ---------------


def _failing(real: Callable[..., object], when: Callable[[tuple[object, ...]], bool]
             ) -> Callable[..., object]:
    def call(*args: object, **kwargs: object) -> object:
        if when(args):
            raise OSError(28, "No space left on device", str(args[-1]))
        return real(*args, **kwargs)
    return call


def test_the_new_kernel_failing_to_write_leaves_the_backend_untouched(
        tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = snapshot(tree)
    beside_kernel = Path(KERNEL).name + ".opsctl-new"  # where apply stages it in the tree
    writes_kernel = _failing(shutil.copyfile, lambda a: Path(str(a[1])).name == beside_kernel)
    monkeypatch.setattr(patchset.shutil, "copyfile", writes_kernel)
    with pytest.raises(PatchError, match="No space left on device; the tree is unchanged"):
        patchset.apply(tree, patchsets.patch_set_dir(VERSION))
    assert snapshot(tree) == before  # the backend still imports nothing that is missing
    monkeypatch.undo()
    patchset.apply(tree, patchsets.patch_set_dir(VERSION))  # and apply works again
    assert (tree / KERNEL).is_file()


def test_a_rename_failing_half_way_is_rolled_back(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(tree)
    renames_kernel = _failing(os.replace, lambda a: Path(str(a[1])).name == Path(KERNEL).name)
    monkeypatch.setattr(patchset.os, "replace", renames_kernel)
    with pytest.raises(PatchError, match="the tree is unchanged"):
        patchset.apply(tree, patchsets.patch_set_dir(VERSION))
    assert snapshot(tree) == before
