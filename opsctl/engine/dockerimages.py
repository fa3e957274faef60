"""How `opsctl.engine.dockerpy` moves images in and out of the engine: `docker import` of a root
filesystem, a push (tag it REGISTRY/REPO:TAG, push it through the daemon, read the digest
the registry answered), and what an image's config says (repo digests, environment).

Credentials: the Docker SDK reads docker's own client configuration (~/.docker/config.json,
its credential store and helpers, as `docker login` left them) and hands them to the daemon;
opsctl never takes a password or token itself. The digest is the one the daemon reports from
the registry's answer (the stream's `aux.Digest`, else its final `digest:` status line): never
computed here. Kept apart from dockerpy so each stays small; nothing outside opsctl/engine/
imports it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import docker.errors

from opsctl.core.errors import BuildError
from opsctl.engine.api import DIGEST_PATTERN, BuildEvent, image_missing
from opsctl.engine.dockercalls import TRANSPORT, answering

# The longest silence allowed between two messages of a push: a registry may take minutes to
# commit a large layer after its upload, longer than the client's usual per-call timeout.
PUSH_STALL_SECONDS = 600
_STATUS_DIGEST = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")
_UNREACHABLE = re.compile(r"connection refused|no such host|i/o timeout|dial tcp|"
                          r"server gave HTTP response to HTTPS client|certificate", re.I)
_DENIED = re.compile(r"unauthorized|denied|authentication required|no basic auth", re.I)


def repo_digests(client: docker.DockerClient, ref: str) -> list[str]:
    try:
        return list(client.images.get(ref).attrs.get("RepoDigests") or [])
    except docker.errors.ImageNotFound:
        return []


def image_env(client: docker.DockerClient, ref: str) -> dict[str, str] | None:
    """The image's configured environment (Config.Env, `NAME=value` each); None when absent."""
    with answering("inspecting an image"):
        try:
            attrs = client.images.get(ref).attrs
        except docker.errors.ImageNotFound:
            return None
    pairs = [str(item).partition("=") for item in (attrs.get("Config") or {}).get("Env") or []]
    return {name: value for name, _, value in pairs if name}


def import_rootfs(client: docker.DockerClient, tarball: Path, ref: str, changes: list[str]) -> str:
    """`docker import` a root filesystem tarball as `ref` (repository:tag); returns the image id."""
    repository, tag = split_target(ref)
    try:
        client.api.import_image(src=str(tarball), repository=repository, tag=tag, changes=changes)
    except docker.errors.APIError as exc:
        raise BuildError(
            f"the engine refused to import {ref}: {str(exc.explanation or exc).splitlines()[0]}",
            hint="check the engine's log (journalctl -u docker) and free disk space",
        ) from None
    try:
        return str(client.images.get(ref).id)
    except docker.errors.ImageNotFound:
        raise BuildError(f"import of {ref} reported no image", hint="retry with --force") from None


def split_target(target: str) -> tuple[str, str]:
    """REGISTRY/REPO:TAG as (REGISTRY/REPO, TAG); the tag is after the last colon of the last
    path component (a registry's port has its colon before a slash)."""
    repository, _, tag = target.rpartition(":")
    if not repository or "/" in tag:
        raise ValueError(f"{target} names no tag")
    return repository, tag


def push(client: docker.DockerClient, image: str, target: str,
         on_event: Callable[[BuildEvent], None]) -> str:
    """Tag `image` (a tag or an image id) as `target` and push it; returns the registry's digest."""
    repository, tag = split_target(target)
    with answering(f"tagging {target}"):
        try:
            client.api.tag(image, repository, tag)
        except docker.errors.ImageNotFound:
            raise image_missing(image) from None
    api = client.api
    usual_timeout = api.timeout
    api.timeout = PUSH_STALL_SECONDS
    try:
        with answering(f"pushing {target}"):
            try:
                stream = api.push(repository, tag=tag, stream=True, decode=True)
                return _follow(stream, target, on_event)
            except docker.errors.APIError as exc:
                if exc.status_code is not None and exc.status_code >= 500:
                    raise
                raise push_error(target, str(exc.explanation or exc)) from None
    except BaseException:
        _untag(client, target)  # a failed push leaves no tag of a registry behind
        raise
    finally:
        api.timeout = usual_timeout


def _untag(client: docker.DockerClient, target: str) -> None:
    """Remove the tag `target` only (the image keeps its other tags and stays)."""
    with contextlib.suppress(docker.errors.DockerException, *TRANSPORT):
        client.api.remove_image(target, force=False, noprune=True)


def _follow(stream: Any, target: str, on_event: Callable[[BuildEvent], None]) -> str:
    digest = ""
    for chunk in stream:
        if chunk.get("error") or chunk.get("errorDetail"):
            detail = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error")
            raise push_error(target, str(detail))
        aux = chunk.get("aux") or {}
        if DIGEST_PATTERN.fullmatch(str(aux.get("Digest", ""))):
            digest = str(aux["Digest"])
        status = str(chunk.get("status") or "")
        found = _STATUS_DIGEST.search(status)
        if found and not digest:
            digest = found.group(1)
        if status:
            layer = f"{chunk['id']}: " if chunk.get("id") else ""
            on_event(BuildEvent(text=f"{layer}{status} {chunk.get('progress') or ''}".rstrip(),
                                step="push"))
    if not digest:
        raise BuildError(f"the push of {target} ended without the registry's digest",
                         hint="push again; `docker push` shows the registry's whole answer")
    return digest


def push_error(target: str, detail: str) -> BuildError:
    """The daemon's or registry's refusal as one line, with what to do about it."""
    said = " ".join(detail.split())[:240]
    registry = target.split("/", 1)[0]
    if _DENIED.search(said):
        hint = (f"log in with `docker login {registry}` (opsctl uses docker's own credential "
                "store and never takes a password itself), and check the repository's push rights")
    elif _UNREACHABLE.search(said):
        hint = (f"check that {registry} is up and reachable from the Docker daemon; a registry "
                "without TLS must be listed in dockerd's insecure-registries (127.0.0.0/8 is by "
                "default)")
    else:
        hint = "see the registry's message; `docker push` shows its whole answer"
    return BuildError(f"push of {target} failed: {said}", hint=hint)
