"""The lock file `deploy/locks/<profile>.json`: the digest each base reference had when built.

In a checkout the locks sit beside the profiles (and are committed). An installed opsctl writes
them in the state directory (`<state dir>/locks/`), never into its package; a profile with no lock
there yet is checked against the lock the wheel carries (the committed one), if any.

The first build of a profile on a base records the digest the engine reported; later builds
must find the same digest (a registry tag that moved is an error) unless `--force` re-locks it.
A base that opsctl built itself on this host is re-locked with a warning: debootstrap is not
bit-reproducible, so rebuilding it always gives a new id, and no registry tag can have moved.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opsctl.core import labels
from opsctl.core.errors import BuildError
from opsctl.core.files import atomic_write_text
from opsctl.core.paths import default_state_dir, is_installed, project_root
from opsctl.engine.api import BuildEvent
from opsctl.image.baseimage import ROLE_BASE, ROLE_STANDIN

LOCK_DIR_ENV = "OPSCTL_LOCK_DIR"


@dataclass(frozen=True)
class BaseResolution:
    """The base as the engine has it: what FROM uses and what is locked."""

    ref: str  # as the user or profile named it
    from_ref: str  # pinned: name@sha256:... (pulled image) or the image id (local image)
    digest: str  # sha256:...
    kind: str  # "repo-digest" or "image-id"


def lock_dir() -> Path:
    override = os.environ.get(LOCK_DIR_ENV)
    if override:
        return Path(override)
    if is_installed():
        return default_state_dir() / "locks"
    return project_root() / "deploy" / "locks"


def _packaged(path: Path) -> Path:
    """The wheel's own copy of the lock at `path` where opsctl is installed and has none of
    its own."""
    if (
        path.is_file()
        or not is_installed()
        or os.environ.get(LOCK_DIR_ENV)
        or path.parent != lock_dir()
    ):
        return path
    return project_root() / "deploy" / "locks" / path.name


def read_lock(path: Path) -> dict[str, dict[str, str]]:
    """base reference -> {"digest", "kind"}; empty when the profile was never built here."""
    path = _packaged(path)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError:
        data = None
    bases = data.get("bases") if isinstance(data, dict) else None
    if not isinstance(bases, dict) or not all(isinstance(entry, dict) for entry in bases.values()):
        raise BuildError(f"lock file {path} is not valid",
                         hint="restore it from version control, or delete it and rebuild")
    return bases


def write_lock(path: Path, profile: str, base: BaseResolution) -> None:
    bases = read_lock(path)
    bases[base.ref] = {"digest": base.digest, "kind": base.kind}
    payload = {
        "comment": "written by `opsctl build` from what the engine reported; never edit by hand",
        "profile": profile,
        "bases": dict(sorted(bases.items())),
    }
    atomic_write_text(path, json.dumps(payload, indent=2) + "\n")


def check_lock(path: Path, base: BaseResolution, force: bool, base_labels: dict[str, str],
               on_event: Callable[[BuildEvent], None]) -> bool:
    """Whether the base must be re-locked; BuildError when its digest moved and that is not
    allowed."""
    locked = read_lock(path).get(base.ref)
    if locked is None or locked.get("digest") == base.digest:
        return False
    own_local_base = (
        base.kind == "image-id"
        and base_labels.get(labels.ROLE) in {ROLE_BASE, ROLE_STANDIN}
        and base_labels.get(labels.MANAGED) == labels.TRUE
    )
    if not force and not own_local_base:
        raise BuildError(
            f"base {base.ref} is now {base.digest}, but {path} locked {locked.get('digest')}",
            hint="the tag moved or the base was rebuilt; check why, then --force re-locks it",
        )
    why = "--force" if force else "opsctl rebuilt its own local base on this host"
    on_event(BuildEvent(text=f"WARNING: re-locking base {base.ref}: {locked.get('digest')} -> "
                        f"{base.digest} ({why})", step="lock"))
    return True
