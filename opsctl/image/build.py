"""`opsctl build`: a planned image built on the engine, then verified in a throwaway container.

How a build goes (plan.py decides what; this module does it):
  resolve the base on the engine (opsctl never pulls), check it against the lock file (lock.py),
  compute the content hash over everything that shapes the image, skip when that tag already
  exists and this host verified it (trust.py; a tag without that record is verified again),
  stage the context into a temp dir (context.py), build, then verify the image in a throwaway
  container and record the verification. Any failure, and Ctrl-C, removes what this build
  created (BuildError for a failure).

Builder: the Docker SDK's classic builder (`Engine.build`), not BuildKit/`docker buildx`. The
build needs no secret (no model-hub token: weights are mounted at run time, never baked in) and
no network (every input, wheels included, is staged into the context from the host), which are
the two things only BuildKit can do (`RUN --mount=type=secret`, cache mounts). The SDK gives
structured progress, typed errors and no dependency on a buildx plugin being installed. Should a
build ever need a secret, it must move to `docker buildx build --secret` - never an ARG.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsctl.core import labels
from opsctl.core.errors import BuildError
from opsctl.engine.api import BuildEvent, Engine
from opsctl.image import imagecheck, trust
from opsctl.image.basecheck import missing_base_hint
from opsctl.image.context import stage_context
from opsctl.image.lock import BaseResolution, check_lock, write_lock
from opsctl.image.plan import BuildPlan

_LAYER_ID = re.compile(r"^ ---> ([0-9a-f]{12})$")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_STEP_NO = re.compile(r"^Step (\d+/\d+) :")
# Lines that say why a step failed: patchset.py's and imagecheck's errors, the version guard.
_TELLING = re.compile(r"^(error:|opsctl:|.*Error\b)")


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    content_hash: str
    base: BaseResolution
    skipped: bool
    relocked: bool = False
    checks: list[dict[str, Any]] = field(default_factory=list)
    reverified: bool = False  # it existed, but was not recorded as verified here


def resolve_base(engine: Engine, ref: str, sglang_version: str | None = None) -> BaseResolution:
    image_id = engine.image_id(ref)
    if image_id is None:
        raise BuildError(f"base image {ref} is not present on this engine",
                         hint=missing_base_hint(ref, sglang_version))
    name = _repository_of(ref)
    for repo_digest in engine.image_repo_digests(ref):
        repo, _, digest = repo_digest.partition("@")
        if _normalise(repo) == _normalise(name):
            return BaseResolution(ref=ref, from_ref=repo_digest, digest=digest, kind="repo-digest")
    if "@" in ref:
        raise BuildError(f"base image {ref} is named by digest but the engine has no such digest",
                         hint=f"docker pull {ref}")
    return BaseResolution(ref=ref, from_ref=image_id, digest=image_id, kind="image-id")


def _repository_of(ref: str) -> str:
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in last else name


def _normalise(repo: str) -> str:
    for prefix in ("docker.io/", "index.docker.io/"):
        if repo.startswith(prefix):
            repo = repo[len(prefix):]
    return repo.removeprefix("library/")


def build(
    plan: BuildPlan, engine: Engine, force: bool, on_event: Callable[[BuildEvent], None]
) -> BuildResult:
    base = resolve_base(engine, plan.base_image, plan.sglang_version)
    relocked = check_lock(plan.lock_path, base, force, engine.image_labels(base.from_ref) or {},
                          on_event)
    content_hash = plan.content_hash(base.digest)
    tag = plan.requested_tag or plan.content_tag(base.digest)

    existing = engine.image_labels(tag)
    if existing is not None and not force:
        return _existing(plan, engine, base, tag, existing, content_hash, relocked, on_event)

    # --force over an image verified here: a Ctrl-C during the new one's verification must leave
    # that one tagged (issue 25, L: it left none, since an unchanged rebuild is the same image).
    previous = engine.image_id(tag) if existing is not None else None
    if previous and not trust.is_verified(previous, (existing or {}).get(labels.CONTENT_HASH, "")):
        previous = None
    watcher = _BuildWatcher(on_event)
    with tempfile.TemporaryDirectory(prefix="opsctl-build-") as work:
        context = Path(work)
        stage_context(plan, context, base, content_hash)
        build_args = {**plan.build_args, "BASE_IMAGE": base.from_ref,
                      "SGLANG_VERSION": plan.sglang_version}
        try:
            image_id = engine.build(context, "Dockerfile", tag, build_args,
                                    plan.labels(base.digest, content_hash), watcher)
        except BuildError as exc:
            _remove_layers(engine, watcher.created)
            raise watcher.failure(exc) from None
    try:
        checks = verify(engine, plan, image_id, content_hash, on_event)
    except BaseException as exc:
        if not isinstance(exc, BuildError):  # a failed verification removed it already
            _interrupted(engine, image_id, previous, tag)
        raise
    trust.record_verified(image_id, tag, content_hash)
    write_lock(plan.lock_path, plan.profile, base)
    return BuildResult(tag, image_id, content_hash, base, skipped=False, relocked=relocked,
                       checks=checks)


def _existing(plan: BuildPlan, engine: Engine, base: BaseResolution, tag: str,
              existing: dict[str, str], content_hash: str, relocked: bool,
              on_event: Callable[[BuildEvent], None]) -> BuildResult:
    """The tag exists and no --force: up to date, verified now, or built from other inputs."""
    if existing.get(labels.CONTENT_HASH) != content_hash:
        raise BuildError(f"{tag} exists but was built from other inputs",
                         hint="pick another --tag, or --force to replace it")
    image_id = engine.image_id(tag) or ""
    if trust.is_verified(image_id, content_hash):
        on_event(BuildEvent(text=f"{tag} is up to date (content hash {content_hash[:16]}); "
                            "--force rebuilds it"))
        if plan.locked_digest != base.digest:  # first build here, or just re-locked
            write_lock(plan.lock_path, plan.profile, base)
        return BuildResult(tag, image_id, content_hash, base, skipped=True, relocked=relocked)
    on_event(BuildEvent(text=f"{tag} exists but was never verified on this host: "
                        "verifying it now"))
    checks = verify(engine, plan, image_id, content_hash, on_event)
    trust.record_verified(image_id, tag, content_hash)
    write_lock(plan.lock_path, plan.profile, base)
    return BuildResult(tag, image_id, content_hash, base, skipped=False, relocked=relocked,
                       checks=checks, reverified=True)


def _interrupted(engine: Engine, image_id: str, previous: str | None, tag: str) -> None:
    """Ctrl-C during verification: an image nobody verified is not left tagged (its missing
    record would make the next build verify it again anyway); the verified image the tag named
    before a --force rebuild keeps, or gets back, the tag."""
    if image_id == previous:  # the rebuild reproduced the verified image: it stays as it was
        return
    with contextlib.suppress(Exception):
        engine.remove_image(image_id)
        if previous:
            engine.tag_image(previous, tag)


class _BuildWatcher:
    """Passes build events on; remembers the layers this build created and the step's output."""

    def __init__(self, on_event: Callable[[BuildEvent], None]) -> None:
        self.created: list[str] = []
        self.step_output: list[str] = []
        self._on_event = on_event
        self._cached = False
        self._step: str | None = None

    def __call__(self, event: BuildEvent) -> None:
        if event.step != self._step:
            self._step, self.step_output = event.step, []
        for text in event.text.splitlines():
            if text.strip() == "---> Using cache":
                self._cached = True
            match = _LAYER_ID.match(text)
            if match:
                if not self._cached:
                    self.created.append(match.group(1))
                self._cached = False
            elif not text.startswith(("Step ", " ---> ")):
                self.step_output.append(ANSI_ESCAPE.sub("", text))
        self._on_event(event)

    def failure(self, engine_error: BuildError) -> BuildError:
        """One line: the step's most telling output line, then which step it was."""
        lines = [line.strip() for line in self.step_output if line.strip()]
        telling = [line for line in lines if _TELLING.match(line)]
        step_no = _STEP_NO.match(self._step or "")
        where = f"build step {step_no.group(1)}" if step_no else "the build"
        if telling:
            reason = re.sub(r"^(error|opsctl): ", "", telling[-1])
            message = f"{reason} ({where} failed)"
        else:
            message = f"{where} failed: {shorten(engine_error.message, 160)}"
        return BuildError(message, hint="the failing step's log tail is above; "
                          "no image or layer of this build was left behind")


def shorten(text: str, width: int) -> str:
    """One line of at most `width` characters (whitespace runs collapsed)."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _remove_layers(engine: Engine, layers: list[str]) -> None:
    """Delete what a failed build committed, newest first; layers other images use stay."""
    for layer in reversed(layers):
        engine.remove_image_if_unused(layer)


def verify(engine: Engine, plan: BuildPlan, image_id: str, content_hash: str,
           on_event: Callable[[BuildEvent], None]) -> list[dict[str, Any]]:
    """Run imagecheck in a throwaway container of the new image; on any failure remove the image."""
    on_event(BuildEvent(text="verifying the image in a throwaway container (no network)",
                        step="verify"))
    expect = {**plan.expect, "content_hash": content_hash}
    source = Path(imagecheck.__file__).read_text()
    code, output = engine.run_to_completion(image_id, ["python3", "-c", source, json.dumps(expect)])
    report = _parse_report(output)
    checks = list(report.get("results", [])) if report else []
    for check in checks:
        mark = "ok  " if check["ok"] else "FAIL"
        on_event(BuildEvent(text=f"{mark} {check['check']}: {check['detail']}", step="verify"))
    failed = [c for c in checks if not c["ok"]]
    if code != 0 or report is None or failed:
        engine.remove_image(image_id)
        if failed:
            first = failed[0]
            message = f"verification failed: {first['check']}: {first['detail']}"
        else:
            message = (
                f"verification did not run (exit {code}): {output.strip()[-200:] or 'no output'}"
            )
        raise BuildError(message + " (image removed)",
                         hint="the base or the patch set is not what the profile pins")
    return checks


def _parse_report(output: str) -> dict[str, Any] | None:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                parsed = json.loads(line)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                return parsed
    return None
