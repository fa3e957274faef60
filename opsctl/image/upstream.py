"""Patch sets against the real upstream release: the sglang wheel from PyPI, unpacked.

Host side only (it uses the wheel cache); patchset.py itself stays standard-library-only for
the image build.
"""

from __future__ import annotations

import dataclasses
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from opsctl.config import patchsets
from opsctl.core import wheels
from opsctl.core.errors import PatchError
from opsctl.core.files import sha256_file
from opsctl.image import patchset


def unpack_wheel(wheel: Path, dest: Path, members: Iterable[str] | None = None) -> Path:
    """Unpack `wheel` (all of it, or only `members` plus the version file) into `dest`."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        if members is not None:
            wanted = set(members) | {"sglang/_version.py", "sglang/__init__.py"}
            names = [n for n in names if n in wanted or n.endswith(".dist-info/METADATA")]
        archive.extractall(dest, members=names)
    return dest


def members_for(version: str) -> list[str]:
    """The files a patch set reads from (or adds to) the sglang tree."""
    manifest = patchsets.load_manifest(version)
    return [f["path"] for f in manifest["files"]] + [
        n["destination"] for n in manifest["new_files"]
    ]


def check_release(sglang_version: str, patch_version: str | None = None,
                  cache_dir: Path | None = None) -> patchset.CheckReport:
    """Check a patch set against the real upstream wheel of `sglang_version` (downloaded once).

    The wheel's sha256 is compared with the manifest's when it is the same wheel file.
    """
    version = patch_version or sglang_version
    manifest = patchsets.load_manifest(version)
    wheel = wheels.fetch("sglang", sglang_version, cache_dir)
    recorded = manifest.get("wheel", {})
    if recorded.get("filename") == wheel.name and sha256_file(wheel) != recorded.get("sha256"):
        raise PatchError(f"{wheel}: sha256 differs from the manifest's for {wheel.name}",
                         hint="the cached wheel is corrupt or not the PyPI release; delete it")
    with tempfile.TemporaryDirectory(prefix="opsctl-wheel-") as tmp:
        unpack_wheel(wheel, Path(tmp), members_for(version))
        return dataclasses.replace(patchset.check(Path(tmp), version), tree=str(wheel))
