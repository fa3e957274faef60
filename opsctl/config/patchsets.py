"""The patch sets of the pinned sglang releases, as data: which exist, where, and their manifests.

`patches/sglang/<version>/manifest.json`, in the release's folder (opsctl.core.paths.release_dir),
records what a patch set changes and what is known about the release (the KV row layouts flashinfer
MLA reads correctly). The patch set is the manifest and the files it lists; the release's records
beside them (cli-args.json, stack.json, defaults.json, resolved/) are no part of it. Profile
validation reads it here (config/support.py); the image room applies the set (image/patchset.py,
which also runs alone inside the image build and so keeps its own minimal reader there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opsctl.core.errors import PatchError
from opsctl.core.paths import RELEASES_DIR, release_dir, releases_root

MANIFEST = "manifest.json"
_REQUIRED = ("sglang_version", "files", "new_files", "switch_env", "layout_findings")


def available_versions() -> list[str]:
    root = releases_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file())


def patch_set_dir(version: str) -> Path:
    path = release_dir(version)
    if not (path / MANIFEST).is_file():
        known = ", ".join(available_versions()) or "none"
        raise PatchError(
            f"no patch set for sglang {version}",
            hint=f"patch sets exist for: {known} ({RELEASES_DIR}/<version>/{MANIFEST})",
        )
    return path


def read_manifest(patch_dir: Path) -> dict[str, Any]:
    path = patch_dir / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PatchError(f"cannot read {path}: {exc}", hint="restore the patch set") from None
    for key in _REQUIRED:
        if key not in data:
            raise PatchError(f"{path}: manifest lacks {key!r}", hint="restore the patch set")
    return data


def load_manifest(version: str) -> dict[str, Any]:
    return read_manifest(patch_set_dir(version))


