"""Maintainers: recompute a patch set's manifest hashes from the real upstream tree.

    python3 -m opsctl.image.rehash --version 0.5.23 --sglang-src DIR [--wheel WHEEL]

Run after the kernel or a diff changed on purpose; `opsctl patch check` then proves the new
manifest against the release. Kept out of patchset.py, which the image build runs, because the
build never rewrites a manifest.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opsctl.config.patchsets import read_manifest
from opsctl.core.files import sha256_file
from opsctl.image.patchset import (
    MANIFEST,
    _new_file_source,
    _run_patch,
    patch_set_dir,
)


def rehash(version: str, sglang_src: Path, wheel: Path | None = None) -> dict[str, Any]:
    """Recompute every sha256 in `version`'s manifest from `sglang_src` and the repo files."""
    patch_dir = patch_set_dir(version)
    manifest = read_manifest(patch_dir)
    for entry in manifest["files"]:
        upstream = Path(sglang_src) / entry["path"]
        entry["upstream_sha256"] = sha256_file(upstream)
        with tempfile.TemporaryDirectory(prefix="opsctl-rehash-") as tmp:
            target = Path(tmp) / entry["path"]
            target.parent.mkdir(parents=True)
            shutil.copyfile(upstream, target)
            _run_patch(Path(tmp), patch_dir / entry["diff"])
            entry["patched_sha256"] = sha256_file(target)
    for entry in manifest["new_files"]:
        entry["sha256"] = sha256_file(_new_file_source(patch_dir, entry))
    if wheel is not None:
        manifest["wheel"] = {"filename": wheel.name, "sha256": sha256_file(wheel)}
    (patch_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m opsctl.image.rehash",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True)
    parser.add_argument("--sglang-src", required=True, type=Path)
    parser.add_argument("--wheel", type=Path)
    args = parser.parse_args(argv)
    rehash(args.version, args.sglang_src, args.wheel)
    print(f"rehashed {patch_set_dir(args.version) / MANIFEST}")


if __name__ == "__main__":
    _main()
