"""`opsctl build --push REGISTRY/REPO`: push an image this host verified, and remember the digest
the registry answered, so that cluster manifests can name the image by digest.

A cluster cannot pull a local tag, and a tag in a registry can move; a digest names exactly the
image `opsctl build` verified. The digest comes from the registry's answer to the push
(`Engine.push`); opsctl never computes or accepts one typed in. What was pushed is kept beside
the verification records, written atomically:

    <state dir>/images/pushed.json   {local image id: {"local_tag", "content_hash",
                                      "pushes": {REGISTRY/REPO: {"target", "digest", "pushed_at"}}}}

`pushed_reference(tag or image id)` answers "REGISTRY/REPO@sha256:..." from it, or None before
a push: `opsctl render` then writes the local tag and warns, it never invents a digest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opsctl.core.errors import BuildError, UsageError
from opsctl.core.files import atomic_write_text
from opsctl.core.imageref import is_repository, reference_problem
from opsctl.engine.api import DIGEST_PATTERN, BuildEvent, Engine
from opsctl.image import trust
from opsctl.image.build import BuildResult

RECORD = "pushed.json"  # beside trust.py's verified.json
# Docker's reference grammar (repositories, references) is core.imageref's.


@dataclass(frozen=True)
class PushResult:
    local_tag: str
    image_id: str
    target: str  # REGISTRY/REPO:TAG as pushed
    digest: str  # sha256:..., the registry's answer

    @property
    def reference(self) -> str:
        """What a manifest names: REGISTRY/REPO@sha256:..."""
        return f"{self.target.rsplit(':', 1)[0]}@{self.digest}"


def record_path() -> Path:
    return trust.record_path().with_name(RECORD)


def check_repository(value: str) -> str:
    """`--push`'s REGISTRY/REPO, refused (exit 2) before anything is built when it is not one."""
    if is_repository(value):
        return value
    if "@" in value:
        hint = ("no digest or credentials in it: the registry answers the digest, and "
                "`docker login REGISTRY` stores credentials in docker's own credential store")
    else:
        hint = ("e.g. registry.example.com:5000/team/opsctl-sglang: lower case, no tag (each "
                "image is pushed under its own tag)")
    raise UsageError(f"--push {value!r}: not a repository name (REGISTRY/REPO)", hint=hint)


def image_ref_problem(value: str) -> str | None:
    """Why `value` cannot name an image for `docker run`, or None."""
    if not value:
        return "empty (leave --image out to run the image `opsctl build` made)"
    return reference_problem(value)


def tag_of(ref: str) -> str:
    """The tag of a local image reference (`latest` when it names none)."""
    name, _, tag = ref.rpartition(":")
    return tag if name and "/" not in tag else "latest"


def push(engine: Engine, result: BuildResult, repository: str,
         on_event: Callable[[BuildEvent], None]) -> PushResult:
    """Push the image `result` describes as REPOSITORY:<its tag>, only when this host verified
    it (trust.py); record the registry's digest. BuildError (exit 3) on any failure."""
    if not trust.is_verified(result.image_id, result.content_hash):
        raise BuildError(f"{result.tag} was not verified on this host; opsctl pushes only images "
                         "it verified", hint="run `opsctl build` (it verifies the image), then "
                         "push again")
    target = f"{repository}:{tag_of(result.tag)}"
    on_event(BuildEvent(text=f"pushing {result.tag} as {target}"))
    digest = engine.push(result.image_id, target, on_event)
    if not DIGEST_PATTERN.fullmatch(digest):
        raise BuildError(f"the push of {target} answered no sha256 digest ({digest[:80]!r})",
                         hint="push again; `docker push` shows the registry's whole answer")
    pushed = PushResult(result.tag, result.image_id, target, digest)
    _record(pushed, result.content_hash, repository)
    return pushed


def _record(pushed: PushResult, content_hash: str, repository: str) -> None:
    path = record_path()
    records = trust.read_records(path)
    entry = records.get(pushed.image_id, {})
    kept = entry.get("pushes")
    pushes: dict[str, Any] = kept if isinstance(kept, dict) else {}
    pushes[repository] = {"target": pushed.target, "digest": pushed.digest,
                          "pushed_at": datetime.now(UTC).isoformat(timespec="seconds")}
    records[pushed.image_id] = {"local_tag": pushed.local_tag, "content_hash": content_hash,
                                "pushes": dict(sorted(pushes.items()))}
    atomic_write_text(path, json.dumps(dict(sorted(records.items())), indent=2) + "\n")


def pushed_reference(ref: str, repository: str | None = None) -> str | None:
    """REGISTRY/REPO@sha256:... of the image `ref` names (a local image id, exact; or a local
    tag: the latest push of an image built under it), optionally only pushes to `repository`;
    None when it was never pushed from this host."""
    found: list[tuple[str, str]] = []  # (pushed_at, reference)
    for image_id, entry in trust.read_records(record_path()).items():
        if ref not in (image_id, entry.get("local_tag")) or not isinstance(
            entry.get("pushes"), dict
        ):
            continue
        for repo, push_entry in entry["pushes"].items():
            if repository not in (None, repo) or not isinstance(push_entry, dict):
                continue
            reference = _reference(repo, push_entry)
            if reference:
                found.append((str(push_entry.get("pushed_at", "")), reference))
    return max(found)[1] if found else None


def _reference(repo: str, entry: dict[str, Any]) -> str | None:
    """A well-formed reference from a record, or None (a hand-edited file is never trusted)."""
    digest = str(entry.get("digest", ""))
    if not DIGEST_PATTERN.fullmatch(digest) or not is_repository(repo):
        return None
    return f"{repo}@{digest}"
