"""`opsctl build`: profile + Dockerfile + patch set -> a verified image tagged by its content hash.

How a build goes:
  1. `plan()` (no engine): which Dockerfile, base, patch set, kernel and build args; what goes
     into the build context; the base digest recorded in the lock file, hence the tag.
  2. `build()`: resolve the base on the engine (opsctl never pulls), check it against the lock
     file `deploy/locks/<profile>.json` (first build records it; a mismatch fails unless --force
     re-locks), compute the content hash over everything that shapes the image, skip when that
     tag already exists, stage the context into a temp dir, build, then verify the image in a
     throwaway container. Any failure removes what this build created and raises BuildError.

Builder: the Docker SDK's classic builder (`Engine.build`), not BuildKit/`docker buildx`. The
build needs no secret (no model-hub token: weights are mounted at run time, never baked in) and
no network (every input, wheels included, is staged into the context from the host), which are
the two things only BuildKit can do (`RUN --mount=type=secret`, cache mounts). The SDK gives
structured progress, typed errors and no dependency on a buildx plugin being installed. Should a
build ever need a secret, it must move to `docker buildx build --secret` - never an ARG.

Reproducibility: the tag is `<repository>:<sglang version>-<16 hex of the content hash>`; the hash
covers the Dockerfile, every staged file, the build args, the labels and the base digest. No
`org.opencontainers.image.created` label is written: a wall-clock label would make two builds of
the same inputs differ; the engine's own `Created` field already records when it was built.
Staged files get a fixed mtime and .pyc files are checked-hash, so layers do not depend on when
the checkout was touched.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsctl import __version__
from opsctl.core.errors import BuildError, ProfileError, UsageError
from opsctl.core.paths import project_root
from opsctl.deploy.profiles import PATCH_SWITCH_ENV, Profile
from opsctl.engine.dockerpy import MANAGED_LABEL, BuildEvent, Engine
from opsctl.image import baseimage, imagecheck, patchset

LOCK_DIR_ENV = "OPSCTL_LOCK_DIR"
IMAGE_BUILD_DIR = "/opt/opsctl/build"  # where the context's opsctl-build/ lands in the image
METADATA_PATH = f"{IMAGE_BUILD_DIR}/build.json"
RESERVED_BUILD_ARGS = ("BASE_IMAGE", "SGLANG_VERSION")
# Build args end up in `docker history`; a name like these means someone is about to leak one.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|CREDENTIAL|PRIVATE", re.I)
_LAYER_ID = re.compile(r"^ ---> ([0-9a-f]{12})$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP_NO = re.compile(r"^Step (\d+/\d+) :")
# Lines that say why a step failed: patchset.py's and imagecheck's errors, the version guard.
_TELLING = re.compile(r"^(error:|opsctl:|.*Error\b)")
_FIXED_MTIME = 315532800  # 1980-01-01: a constant, so COPY layers do not depend on checkout times
SIM_DISTRIBUTIONS = ("prometheus_client",)


@dataclass(frozen=True)
class BaseResolution:
    """The base as the engine has it: what FROM uses and what is locked."""

    ref: str  # as the user or profile named it
    from_ref: str  # pinned: name@sha256:... (pulled image) or the image id (local image)
    digest: str  # sha256:...
    kind: str  # "repo-digest" or "image-id"


@dataclass(frozen=True)
class BuildPlan:
    profile: str
    kind: str  # "sglang" or "simulator"
    repository: str
    base_image: str
    base_overridden: bool
    sglang_version: str
    dockerfile: Path
    build_args: dict[str, str]
    patch_set_sha256: str | None
    files: dict[str, Path]  # path inside the build context -> source on the host
    expect: dict[str, Any]  # what imagecheck verifies (the manifest's sha256s, version, switch)
    lock_path: Path
    locked_digest: str | None
    requested_tag: str | None = None

    def content_hash(self, base_digest: str) -> str:
        """sha256 over everything that shapes the image."""
        shaping = {
            "dockerfile": _sha256(self.dockerfile),
            "files": {name: _sha256(path) for name, path in sorted(self.files.items())},
            "build_args": self.build_args,
            "base_image": self.base_image,
            "base_digest": base_digest,
            "labels": self.static_labels(),
            "expect": self.expect,
        }
        canonical = json.dumps(shaping, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def content_tag(self, base_digest: str) -> str:
        return f"{self.repository}:{self.sglang_version}-{self.content_hash(base_digest)[:16]}"

    def tag(self, base_digest: str | None) -> str | None:
        """The tag to build; None when it depends on a base digest not locked yet."""
        if self.requested_tag:
            return self.requested_tag
        return self.content_tag(base_digest) if base_digest else None

    def static_labels(self) -> dict[str, str]:
        return {
            MANAGED_LABEL: "true",
            "opsctl.role": "image",
            "opsctl.profile": self.profile,
            "opsctl.image-kind": self.kind,
            "opsctl.version": __version__,
            "opsctl.sglang-version": self.sglang_version,
            "opsctl.patch-sha256": self.patch_set_sha256 or "none",
            "org.opencontainers.image.title": self.repository,
            "org.opencontainers.image.version": self.sglang_version,
            "org.opencontainers.image.base.name": self.base_image,
        }

    def labels(self, base_digest: str, content_hash: str) -> dict[str, str]:
        return {
            **self.static_labels(),
            "opsctl.base-digest": base_digest,
            "opsctl.content-hash": content_hash,
            "org.opencontainers.image.base.digest": base_digest,
        }

    def describe(self) -> list[tuple[str, str]]:
        """The plan as (field, value) rows, for --dry-run."""
        tag = self.tag(self.locked_digest)
        rows = [
            ("profile", self.profile),
            ("kind", self.kind),
            ("base", self.base_image + ("  (--base-image)" if self.base_overridden else "")),
            ("base digest", self.locked_digest or f"not locked yet ({self.lock_path} records it "
             "at the first build)"),
            ("dockerfile", str(self.dockerfile)),
            ("sglang", self.sglang_version),
            ("patch set", f"sha256 {self.patch_set_sha256}" if self.patch_set_sha256 else "none"),
            ("build args", " ".join(f"{k}={v}" for k, v in sorted(self.build_args.items())) or "none"),
            ("context", " ".join(sorted(self.files))),
            ("tag", tag or "<repository>:<version>-<content hash>, decided once the base digest is known"),
        ]
        return rows


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    content_hash: str
    base: BaseResolution
    skipped: bool
    relocked: bool = False
    checks: list[dict[str, Any]] = field(default_factory=list)


# --- planning (no engine) ----------------------------------------------------------------------


def lock_dir() -> Path:
    override = os.environ.get(LOCK_DIR_ENV)
    return Path(override) if override else project_root() / "deploy" / "locks"


def plan(profile: Profile, base_image: str | None = None, tag: str | None = None) -> BuildPlan:
    spec = profile.image
    root = project_root()
    dockerfile = root / spec.dockerfile
    if not dockerfile.is_file():
        raise ProfileError(f"profile {profile.name!r}: image.dockerfile {spec.dockerfile} does not exist",
                           hint="fix image.dockerfile (a path relative to the project root)")
    _check_build_args(profile.name, spec.build_args)
    base = base_image or spec.base
    if tag is not None:
        _check_tag(tag)
    if spec.kind == "sglang":
        files, expect, patch_sha = _sglang_inputs(spec.sglang_version)
    else:
        files, expect, patch_sha = _simulator_inputs(root), _simulator_expect(), None
    files = {**files, "opsctl-build/imagecheck.py": Path(imagecheck.__file__)}
    lock_path = lock_dir() / f"{profile.name}.json"
    return BuildPlan(
        profile=profile.name,
        kind=spec.kind,
        repository=spec.repository,
        base_image=base,
        base_overridden=base_image is not None and base_image != spec.base,
        sglang_version=spec.sglang_version,
        dockerfile=dockerfile,
        build_args=dict(sorted(spec.build_args.items())),
        patch_set_sha256=patch_sha,
        files=files,
        expect=expect,
        lock_path=lock_path,
        locked_digest=read_lock(lock_path).get(base, {}).get("digest"),
        requested_tag=tag,
    )


def expected_image(profile: Profile) -> str:
    """The tag the current sources build for the profile's own base (what `opsctl up` runs).

    Before the first build there is no locked base digest; the tag returned then names no image,
    so the caller's "image absent: run `opsctl build`" path applies.
    """
    built = plan(profile)
    return built.tag(built.locked_digest) or f"{built.repository}:{built.sglang_version}-not-built"


def _check_build_args(profile: str, build_args: dict[str, str]) -> None:
    for name in build_args:
        if name in RESERVED_BUILD_ARGS:
            raise ProfileError(f"profile {profile!r}: build arg {name} is set by opsctl itself",
                               hint="use image.base / --base-image and image.sglang_version instead")
        if _SECRET_NAME.search(name):
            raise ProfileError(
                f"profile {profile!r}: build arg {name} looks like a secret; build args are "
                "readable in `docker history`",
                hint="never pass secrets to a build; weights and tokens are mounted at run time",
            )


def _check_tag(tag: str) -> None:
    name, _, version = tag.rpartition(":")
    if not name or "/" in version or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", version):
        raise UsageError(f"--tag {tag!r} is not repository:tag", hint="e.g. opsctl/sglang-glm5:test")


def _sglang_inputs(version: str) -> tuple[dict[str, Path], dict[str, Any], str]:
    """Context files and expectations for a patched sglang image, from the patch set's manifest.

    The patch set is staged as `patchset.stage_patch_set` lays it out (manifest, diffs, and the
    new files beside them), which is what `patchset.py apply --patch-dir` reads in the image.
    """
    patch_dir = patchset.patch_set_dir(version)
    manifest = patchset.load_manifest(version)
    files: dict[str, Path] = {
        "opsctl-build/patchset.py": Path(patchset.__file__),
        f"opsctl-build/patches/{patchset.MANIFEST}": patch_dir / patchset.MANIFEST,
    }
    for entry in manifest["files"]:
        files[f"opsctl-build/patches/{entry['diff']}"] = patch_dir / entry["diff"]
    for entry in manifest["new_files"]:
        source = project_root() / entry["source"]
        if _sha256(source) != entry["sha256"]:
            # Caught here, before any engine work, as the image build would catch it.
            raise BuildError(
                f"{entry['source']} does not match the patch set {version} manifest "
                f"(sha256 {_sha256(source)[:12]}, manifest {entry['sha256'][:12]})",
                hint="the kernel changed after the manifest was written: "
                "`python3 -m opsctl.image.patchset rehash` (maintainers)")
        files[f"opsctl-build/patches/{Path(entry['source']).name}"] = source
    expected = {entry["path"]: entry["patched_sha256"] for entry in manifest["files"]}
    expected.update({entry["destination"]: entry["sha256"] for entry in manifest["new_files"]})
    switch = str(manifest["switch_env"])
    if switch != PATCH_SWITCH_ENV:
        raise BuildError(
            f"patch set {version} names runtime switch {switch!r}, profiles use "
            f"{PATCH_SWITCH_ENV!r}", hint="the manifest and opsctl.deploy.profiles must agree")
    # The new file that defines the switch (the kernel module the patched backend imports).
    switch_module = next((entry["destination"] for entry in manifest["new_files"]
                          if f'SWITCH_ENV = "{switch}"' in (project_root() / entry["source"]).read_text()),
                         None)
    if switch_module is None:
        raise BuildError(f"no new file of patch set {version} defines SWITCH_ENV = {switch!r}",
                         hint="the kernel module must define the runtime switch the manifest names")
    expect = {
        "distributions": {"sglang": version},
        "files": expected,
        "switch": switch,
        "switch_module": switch_module,
        "metadata_path": METADATA_PATH,
    }
    return files, expect, patchset.patch_set_sha256(version)


def _simulator_inputs(root: Path) -> dict[str, Path]:
    files: dict[str, Path] = {"app/opsctl/__init__.py": root / "opsctl" / "__init__.py"}
    sim_dir = root / "opsctl" / "sim"
    for path in sorted(sim_dir.rglob("*.py")):
        files[f"app/opsctl/sim/{path.relative_to(sim_dir).as_posix()}"] = path
    for dist in SIM_DISTRIBUTIONS:
        wheel = host_wheel(dist)
        files[f"wheels/{wheel.name}"] = wheel
    return files


def _simulator_expect() -> dict[str, Any]:
    return {
        "modules": ["opsctl.sim", *SIM_DISTRIBUTIONS],
        "distributions": {d: importlib.metadata.version(d) for d in SIM_DISTRIBUTIONS},
        "metadata_path": METADATA_PATH,
    }


def host_wheel(dist: str, cache: Path | None = None) -> Path:
    """The wheel of `dist` at the exact version installed here, from the wheel cache.

    Downloaded on the host (never inside the build) into the cache on first use; the simulator
    image runs the same prometheus_client version the tests ran against.
    """
    version = importlib.metadata.version(dist)
    cache = cache or baseimage.wheel_cache_dir()
    pattern = f"{dist.replace('-', '_')}-{version}-*.whl"
    found = sorted(cache.glob(pattern))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                "--dest", str(cache), f"{dist}=={version}"]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        found = sorted(cache.glob(pattern))
        if result.returncode != 0 or not found:
            reason = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise BuildError(f"no {dist} {version} wheel for the image: {reason}",
                             hint=f"pip download --no-deps {dist}=={version} -d {cache}")
    return found[-1]


# --- the lock file -------------------------------------------------------------------------------


def read_lock(path: Path) -> dict[str, dict[str, str]]:
    """base reference -> {"digest", "kind"}; empty when the profile was never built here."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        bases = data["bases"]
        assert isinstance(bases, dict)
    except (ValueError, KeyError, AssertionError):
        raise BuildError(f"lock file {path} is not valid",
                         hint="restore it from version control, or delete it and rebuild") from None
    return bases


def write_lock(path: Path, profile: str, base: BaseResolution) -> None:
    bases = read_lock(path)
    bases[base.ref] = {"digest": base.digest, "kind": base.kind}
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "comment": "written by `opsctl build` from what the engine reported; never edit by hand",
        "profile": profile,
        "bases": dict(sorted(bases.items())),
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(path)


# --- building ------------------------------------------------------------------------------------


def resolve_base(engine: Engine, ref: str) -> BaseResolution:
    image_id = engine.image_id(ref)
    if image_id is None:
        hint = ("build it with `opsctl base-image`" if ref.startswith("opsctl/")
                else f"opsctl never pulls: `docker pull {ref}` first, then build again")
        raise BuildError(f"base image {ref} is not present on this engine", hint=hint)
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
    if plan.base_image == baseimage.DEBIAN_BASE and engine.image_id(plan.base_image) is None:
        # opsctl's own local base is built, never pulled: a fresh machine gets it here.
        on_event(BuildEvent(text=f"{plan.base_image} is absent: building it first "
                            "(debootstrap + docker import, about a minute)"))
        baseimage.build_debian_base(engine, force=False, on_event=on_event)
    base = resolve_base(engine, plan.base_image)
    relocked = _check_lock(plan, base, force, on_event, engine.image_labels(base.from_ref) or {})
    content_hash = plan.content_hash(base.digest)
    tag = plan.tag(base.digest)
    assert tag is not None
    labels = plan.labels(base.digest, content_hash)

    existing = engine.image_labels(tag)
    if existing is not None and not force:
        if existing.get("opsctl.content-hash") != content_hash:
            raise BuildError(f"{tag} exists but was built from other inputs",
                             hint="pick another --tag, or --force to replace it")
        on_event(BuildEvent(text=f"{tag} is up to date (content hash {content_hash[:16]}); "
                            "--force rebuilds it"))
        if plan.locked_digest != base.digest:  # first build here, or just re-locked
            write_lock(plan.lock_path, plan.profile, base)
        image_id = engine.image_id(tag) or ""
        return BuildResult(tag, image_id, content_hash, base, skipped=True, relocked=relocked)

    watcher = _BuildWatcher(on_event)
    with tempfile.TemporaryDirectory(prefix="opsctl-build-") as work:
        context = Path(work)
        stage_context(plan, context, base, content_hash)
        build_args = {**plan.build_args, "BASE_IMAGE": base.from_ref,
                      "SGLANG_VERSION": plan.sglang_version}
        try:
            image_id = engine.build(context, "Dockerfile", tag, build_args, labels, watcher)
        except BuildError as exc:
            _remove_layers(engine, watcher.created)
            raise watcher.failure(exc) from None
    checks = verify(engine, plan, image_id, content_hash, on_event)
    write_lock(plan.lock_path, plan.profile, base)
    return BuildResult(tag, image_id, content_hash, base, skipped=False, relocked=relocked,
                       checks=checks)


def _check_lock(plan: BuildPlan, base: BaseResolution, force: bool,
                on_event: Callable[[BuildEvent], None], base_labels: dict[str, str]) -> bool:
    locked = read_lock(plan.lock_path).get(base.ref)
    if locked is None or locked.get("digest") == base.digest:
        return False
    # A base that `opsctl base-image` made on this host gets a new id whenever it is rebuilt
    # (debootstrap is not bit-reproducible); no registry tag can have moved under it.
    own_local_base = base.kind == "image-id" and base_labels.get("opsctl.role") in {
        "base", "sglang-standin"} and base_labels.get(MANAGED_LABEL) == "true"
    if not force and not own_local_base:
        raise BuildError(
            f"base {base.ref} is now {base.digest}, but {plan.lock_path} locked "
            f"{locked.get('digest')}",
            hint="the tag moved or the base was rebuilt; check why, then --force re-locks it",
        )
    why = "--force" if force else "opsctl rebuilt its own local base on this host"
    on_event(BuildEvent(text=f"WARNING: re-locking base {base.ref}: {locked.get('digest')} -> "
                        f"{base.digest} ({why})", step="lock"))
    return True


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
                self.step_output.append(_ANSI.sub("", text))
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
            message = f"{where} failed: {_shorten(engine_error.message, 160)}"
        return BuildError(message, hint="the failing step's log tail is above; "
                          "no image or layer of this build was left behind")


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _remove_layers(engine: Engine, layers: list[str]) -> None:
    """Delete what a failed build committed, newest first; layers other images use stay."""
    for layer in reversed(layers):
        engine.remove_image_if_unused(layer)


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
            message = f"verification did not run (exit {code}): {output.strip()[-200:] or 'no output'}"
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


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
