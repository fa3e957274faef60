"""What `opsctl build` will build, decided without an engine: the plan, its content hash and tag.

`plan()` picks the Dockerfile, base, patch set, kernel and build args of one image and lists
what goes into the build context; the base digest recorded in the lock file completes the tag.
A profile needs one image per distinct `ImageSpec` among its variants (a variant may pin its own
sglang release); `plans()` lists them, and every image of a release carries that release's patch
set whether or not the variants running it switch the patch on.

An image with `image.install_release` on the profile's own base also installs the pinned release
into that base (wheelhouse.py, overlay.py): its expectations carry the release's pins from the
stack record and the release wheel's sha256, and imagecheck proves every pin; the wheels
themselves are fetched and staged with the context, not planned here.

Reproducibility: the tag is `<repository>:<sglang version>-<16 hex of the content hash>`; the hash
covers the Dockerfile, every staged file, the build args, the labels and the base digest. No
`org.opencontainers.image.created` label is written: a wall-clock label would make two builds of
the same inputs differ; the engine's own `Created` field already records when it was built.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl import __version__
from opsctl.config import patchsets
from opsctl.config.profile_checks import is_secret_name
from opsctl.config.profiles import PATCH_SWITCH_ENV, Deployment, ImageSpec, Profile
from opsctl.config.releasefacts import DEFAULTS_FILE
from opsctl.config.resolve import RECORD_DIR
from opsctl.config.runspec import NO_PATCH
from opsctl.core import labels, wheels
from opsctl.core.errors import BuildError, ProfileError, UsageError
from opsctl.core.files import sha256_file
from opsctl.core.paths import RELEASES_DIR, project_root, source_root
from opsctl.image import imagecheck, overlay, patchset, wheelhouse
from opsctl.image.lock import lock_dir, read_lock

IMAGE_BUILD_DIR = "/opt/opsctl/build"  # where the context's opsctl-build/ lands in the image
METADATA_PATH = f"{IMAGE_BUILD_DIR}/build.json"
PATCHES_DIR = "opsctl-build/patches"  # the Dockerfile's `patchset.py apply --patch-dir`
RESERVED_BUILD_ARGS = ("BASE_IMAGE", "SGLANG_VERSION")
SIM_DISTRIBUTIONS = ("prometheus_client",)


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
    # The profile's variants that run this image (shown, not hashed: adding a variant to an
    # image changes nothing in it).
    variants: tuple[str, ...] = ()

    def content_hash(self, base_digest: str) -> str:
        """sha256 over everything that shapes the image."""
        shaping = {
            "dockerfile": sha256_file(self.dockerfile),
            "files": {name: sha256_file(path) for name, path in sorted(self.files.items())},
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
            labels.MANAGED: labels.TRUE,
            labels.ROLE: labels.ROLE_IMAGE,
            labels.PROFILE: self.profile,
            labels.IMAGE_KIND: self.kind,
            labels.VERSION: __version__,
            labels.SGLANG_VERSION: self.sglang_version,
            labels.PATCH_SHA256: self.patch_set_sha256 or NO_PATCH,
            "org.opencontainers.image.title": self.repository,
            "org.opencontainers.image.version": self.sglang_version,
            "org.opencontainers.image.base.name": self.base_image,
        }

    def labels(self, base_digest: str, content_hash: str) -> dict[str, str]:
        return {
            **self.static_labels(),
            labels.BASE_DIGEST: base_digest,
            labels.CONTENT_HASH: content_hash,
            "org.opencontainers.image.base.digest": base_digest,
        }

    def describe(self) -> list[tuple[str, str]]:
        """The plan as (field, value) rows, for --dry-run."""
        tag = self.tag(self.locked_digest)
        return [
            ("profile", self.profile),
            ("variants", ", ".join(self.variants) or "none"),
            ("kind", self.kind),
            ("base", self.base_image + ("  (--base-image)" if self.base_overridden else "")),
            (
                "base digest",
                self.locked_digest
                or f"not locked yet ({self.lock_path} records it at the first build)",
            ),
            ("dockerfile", str(self.dockerfile)),
            ("sglang", self.sglang_version),
            ("patch set", f"sha256 {self.patch_set_sha256}" if self.patch_set_sha256 else "none"),
            ("release", self._release_row()),
            (
                "build args",
                " ".join(f"{k}={v}" for k, v in sorted(self.build_args.items())) or "none",
            ),
            ("context", " ".join(sorted(self.files))),
            (
                "tag",
                tag
                or "<repository>:<version>-<content hash>, decided once the base digest is known",
            ),
        ]

    def _release_row(self) -> str:
        overlay = self.expect.get("overlay")
        if not overlay:
            return f"the base's own sglang, which must be {self.sglang_version}"
        return (f"installed into the base: {overlay['wheel']} and the {len(overlay['pins']) - 1} "
                "== pins of its METADATA, each where the base holds another version (wheels "
                "from the host's wheel cache)")


def plan(profile: Profile, base_image: str | None = None, tag: str | None = None,
         image: ImageSpec | None = None) -> BuildPlan:
    """The build of one image of the profile: `image` (default: the profile's own)."""
    spec = image or profile.image
    root = project_root()
    dockerfile = root / spec.dockerfile
    if not dockerfile.is_file():
        raise ProfileError(
            f"profile {profile.name!r}: image.dockerfile {spec.dockerfile} does not exist",
            hint="fix image.dockerfile (a path relative to the project root)",
        )
    _check_build_args(profile.name, spec.build_args)
    base = base_image or spec.base
    if tag is not None:
        _check_tag(tag)
    if spec.kind == "sglang":
        files, expect, patch_sha = _sglang_inputs(spec.sglang_version)
    else:
        files, expect, patch_sha = _simulator_inputs(root, source_root()), _simulator_expect(), None
    files = {**files, "opsctl-build/imagecheck.py": Path(imagecheck.__file__)}
    # The release is brought into the profile's base; `--base-image` names one that holds it.
    if _installs_release(profile.name, spec, base_image):
        release = wheelhouse.release(spec.sglang_version)
        files["opsctl-build/overlay.py"] = Path(overlay.__file__)
        expect = {**expect, "distributions": release["pins"], "overlay": release}
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
        variants=tuple(name for name in profile.variants if profile.variant_image(name) == spec),
    )


def _installs_release(profile: str, spec: ImageSpec, base_image: str | None) -> bool:
    if not spec.install_release:
        return False
    if spec.kind != "sglang":
        raise ProfileError(f"profile {profile!r}: image.install_release is for sglang images",
                           hint="remove it from the simulator's image")
    return base_image is None or base_image == spec.base


def images(profile: Profile, variant: str | None = None) -> list[ImageSpec]:
    """The distinct images the profile's variants run (or the one `variant` runs), in file order."""
    needed: list[ImageSpec] = []
    for name in [profile.resolve(variant).variant] if variant else list(profile.variants):
        spec = profile.variant_image(name)
        if spec not in needed:
            needed.append(spec)
    return needed


def plans(profile: Profile, variant: str | None = None, base_image: str | None = None,
          tag: str | None = None) -> list[BuildPlan]:
    """One plan per image `opsctl build` makes; `--base-image`/`--tag` name exactly one image."""
    needed = images(profile, variant)
    if (base_image or tag) and len(needed) > 1:
        releases = ", ".join(spec.sglang_version for spec in needed)
        option = "--base-image" if base_image else "--tag"
        raise UsageError(
            f"profile {profile.name!r} needs {len(needed)} images (sglang {releases}); "
            f"{option} names one",
            hint="choose its image with --variant V",
        )
    return [plan(profile, base_image=base_image, tag=tag, image=spec) for spec in needed]


def expected_image(deployment: Deployment) -> str:
    """The tag the current sources build for the variant's image and its base (what `up` runs).

    Before the first build there is no locked base digest; the tag returned then names no image,
    so the caller's "image absent: run `opsctl build`" path applies.
    """
    built = plan(deployment.profile, image=deployment.image)
    return built.tag(built.locked_digest) or f"{built.repository}:{built.sglang_version}-not-built"


def _check_build_args(profile: str, build_args: dict[str, str]) -> None:
    for name in build_args:
        if name in RESERVED_BUILD_ARGS:
            raise ProfileError(
                f"profile {profile!r}: build arg {name} is set by opsctl itself",
                hint="use image.base / --base-image and image.sglang_version instead",
            )
        # Build args end up in `docker history`: a secret's name means one is about to leak.
        if is_secret_name(name):
            raise ProfileError(
                f"profile {profile!r}: build arg {name} looks like a secret; build args are "
                "readable in `docker history`",
                hint="never pass secrets to a build; weights and tokens are mounted at run time",
            )


def _check_tag(tag: str) -> None:
    name, _, version = tag.rpartition(":")
    if (
        not name
        or "/" in version
        or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", version)
    ):
        raise UsageError(
            f"--tag {tag!r} is not repository:tag", hint="e.g. opsctl/sglang-glm5:test"
        )


def _sglang_inputs(version: str) -> tuple[dict[str, Path], dict[str, Any], str]:
    """Context files and expectations for a patched sglang image, from the patch set's manifest.

    The patch set is staged as `patchset.patch_set_files` lays it out, which is what
    `patchset.py apply --patch-dir` reads in the image.
    """
    manifest = patchsets.load_manifest(version)
    for entry in manifest["new_files"]:
        source = source_root() / entry["source"]
        if sha256_file(source) != entry["sha256"]:
            # Caught here, before any engine work, as the image build would catch it.
            raise BuildError(
                f"{entry['source']} does not match the patch set {version} manifest "
                f"(sha256 {sha256_file(source)[:12]}, manifest {entry['sha256'][:12]})",
                hint="the kernel changed after the manifest was written: "
                "`python3 -m opsctl.image.rehash` (maintainers)")
    files = {"opsctl-build/patchset.py": Path(patchset.__file__)}
    files.update({f"{PATCHES_DIR}/{name}": source
                  for name, source in patchset.patch_set_files(version).items()})
    expected = {entry["path"]: entry["patched_sha256"] for entry in manifest["files"]}
    expected.update({entry["destination"]: entry["sha256"] for entry in manifest["new_files"]})
    switch = str(manifest["switch_env"])
    if switch != PATCH_SWITCH_ENV:
        raise BuildError(
            f"patch set {version} names runtime switch {switch!r}, profiles use "
            f"{PATCH_SWITCH_ENV!r}", hint="the manifest and opsctl.config.profiles must agree")
    # The new file that defines the switch (the kernel module the patched backend imports).
    switch_module = next(
        (
            entry["destination"]
            for entry in manifest["new_files"]
            if f'SWITCH_ENV = "{switch}"' in (source_root() / entry["source"]).read_text()
        ),
        None,
    )
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


def sim_modules(root: Path) -> list[Path]:
    """The simulator's modules: `opsctl.sim` and `opsctl.sim.__main__` (what the image runs),
    and every `opsctl.sim` module they import, transitively (read with ast, nothing imported).

    A fixed closure, not a glob: a stray or untracked *.py in opsctl/sim/ is never baked into
    the image, and a module the simulator needs is never left out.
    """
    sim_dir = root / "opsctl" / "sim"
    wanted, seen = ["__init__", "__main__"], set()
    while wanted:
        name = wanted.pop()
        path = sim_dir / f"{name}.py"
        if name in seen or not path.is_file():  # also a name imported from a module, not one
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            wanted += _sim_imports(node)
    return sorted(sim_dir / f"{name}.py" for name in seen)


def _sim_imports(node: ast.AST) -> list[str]:
    """The `opsctl.sim` module names an import statement names (possibly names inside one)."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[2] for alias in node.names
                if alias.name.startswith("opsctl.sim.")]
    if not isinstance(node, ast.ImportFrom):
        return []
    module = node.module or ""
    if node.level:  # relative: from .x import y / from . import x
        module = f"opsctl.sim.{module}" if module else "opsctl.sim"
    if module == "opsctl.sim":
        return [alias.name for alias in node.names]
    return [module.split(".")[2]] if module.startswith("opsctl.sim.") else []


def _simulator_inputs(root: Path, source: Path) -> dict[str, Path]:
    """The simulator's modules (from `source`, where the opsctl package is), the release tables
    and records under the project `root`, and the wheels of its one dependency, at the versions
    tested here."""
    files: dict[str, Path] = {"app/opsctl/__init__.py": source / "opsctl" / "__init__.py"}
    for path in sim_modules(source):
        files[f"app/opsctl/sim/{path.name}"] = path
    # Each release's table of defaults and its own resolutions of the profiles' variants
    # (opsctl.sim.releases and opsctl.sim.records read them), at the same path under app/ as
    # under the project root.
    releases = root / RELEASES_DIR
    for path in sorted([*releases.glob(f"*/{DEFAULTS_FILE}"),
                        *releases.glob(f"*/{RECORD_DIR}/*.json")]):
        files[f"app/{path.relative_to(root).as_posix()}"] = path
    for dist in SIM_DISTRIBUTIONS:
        wheel = wheels.fetch(dist, importlib.metadata.version(dist))
        files[f"wheels/{wheel.name}"] = wheel
    return files


def _simulator_expect() -> dict[str, Any]:
    return {
        "modules": ["opsctl.sim", *SIM_DISTRIBUTIONS],
        "distributions": {d: importlib.metadata.version(d) for d in SIM_DISTRIBUTIONS},
        "metadata_path": METADATA_PATH,
    }
