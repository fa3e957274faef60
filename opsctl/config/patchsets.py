"""The patch sets of the pinned sglang releases, as data: which exist, where, and their manifests.

`patches/sglang/<version>/manifest.json` records what a patch set changes and what is known about
the release (the KV row layouts flashinfer MLA reads correctly). Profile validation reads it here
(config/support.py); the image room applies the set (image/patchset.py, which also runs alone
inside the image build and so keeps its own minimal reader there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opsctl.core.errors import PatchError
from opsctl.core.paths import project_root

MANIFEST = "manifest.json"
_REQUIRED = ("sglang_version", "files", "new_files", "switch_env", "layout_findings")


def patches_root() -> Path:
    return project_root() / "patches" / "sglang"


def available_versions() -> list[str]:
    root = patches_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST).is_file())


def patch_set_dir(version: str) -> Path:
    path = patches_root() / version
    if not (path / MANIFEST).is_file():
        known = ", ".join(available_versions()) or "none"
        raise PatchError(
            f"no patch set for sglang {version}",
            hint=f"patch sets exist for: {known} (patches/sglang/<version>/manifest.json)",
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


