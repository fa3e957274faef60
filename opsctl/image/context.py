"""The build context: the Dockerfile, every planned file, and the build's own metadata.

Staged files get a fixed mtime (and the image compiles .pyc files as checked-hash), so layers do
not depend on when the checkout was touched.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from opsctl import __version__
from opsctl.image.lock import BaseResolution
from opsctl.image.plan import BuildPlan

_FIXED_MTIME = 315532800  # 1980-01-01: a constant, so COPY layers do not depend on checkout times


def stage_context(plan: BuildPlan, context: Path, base: BaseResolution, content_hash: str) -> None:
    """Copy the Dockerfile and every planned file into `context`, plus the build metadata."""
    shutil.copyfile(plan.dockerfile, context / "Dockerfile")
    for name, source in plan.files.items():
        target = context / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    build_dir = context / "opsctl-build"
    build_dir.mkdir(exist_ok=True)
    metadata = {
        "opsctl_version": __version__,
        "profile": plan.profile,
        "kind": plan.kind,
        "sglang_version": plan.sglang_version,
        "patch_set_sha256": plan.patch_set_sha256,
        "base_image": base.ref,
        "base_digest": base.digest,
        "content_hash": content_hash,
    }
    (build_dir / "build.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    expect = {**plan.expect, "content_hash": content_hash}
    (build_dir / "expect.json").write_text(json.dumps(expect, indent=2, sort_keys=True) + "\n")
    for path in [context, *context.rglob("*")]:
        os.utime(path, (_FIXED_MTIME, _FIXED_MTIME))
