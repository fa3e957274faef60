"""The build context: the Dockerfile, every planned file, the build's own metadata and, for an
image that installs its release, the wheelhouse (wheelhouse.stage).

Staged files get a fixed mtime (and the image compiles .pyc files as checked-hash), so layers do
not depend on when the checkout was touched.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from opsctl import __version__
from opsctl.image import wheelhouse
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
    release = plan.expect.get("overlay")
    staged = wheelhouse.stage(release, build_dir) if release else None
    metadata = {
        "opsctl_version": __version__,
        "profile": plan.profile,
        "kind": plan.kind,
        "sglang_version": plan.sglang_version,
        "patch_set_sha256": plan.patch_set_sha256,
        "base_image": base.ref,
        "base_digest": base.digest,
        "content_hash": content_hash,
        **({"wheels": staged} if staged is not None else {}),
    }
    (build_dir / "build.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    expect = {**plan.expect, "content_hash": content_hash}
    (build_dir / "expect.json").write_text(json.dumps(expect, indent=2, sort_keys=True) + "\n")
    for path in [context, *context.rglob("*")]:
        os.utime(path, (_FIXED_MTIME, _FIXED_MTIME))
