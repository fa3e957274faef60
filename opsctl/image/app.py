"""The image room's commands as functions: collaborators in, result objects out, nothing printed.

opsctl/cli/image.py parses options, connects the engine and hands what these return to
image/view.py. Build progress goes to the `on_event` callback the caller passes in.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from opsctl.argspec import stack
from opsctl.argspec.extract import Extraction, extract
from opsctl.config import patchsets
from opsctl.config.profiles import Profile
from opsctl.core.errors import UsageError
from opsctl.engine.api import BuildEvent, Engine
from opsctl.image import basecheck, baseimage, patchset, registry, upstream
from opsctl.image import build as builder
from opsctl.image.baseimage import BaseImageResult
from opsctl.image.build import BuildResult
from opsctl.image.patchset import CheckReport
from opsctl.image.plan import BuildPlan, plans
from opsctl.image.registry import PushResult

OnEvent = Callable[[BuildEvent], None]


def build_plans(profile: Profile, variant: str | None = None, base_image: str | None = None,
                tag: str | None = None) -> list[BuildPlan]:
    """What `build` would do: one plan per image the variants need (or the one `variant` runs).

    Needs no engine (`--dry-run` stops here).
    """
    return plans(profile, variant=variant, base_image=base_image, tag=tag)


def build(the_plan: BuildPlan, engine: Engine, force: bool, on_event: OnEvent) -> BuildResult:
    """Build and verify one planned image; opsctl's own Debian base is built first when absent."""
    if (
        the_plan.base_image == baseimage.DEBIAN_BASE
        and engine.image_id(the_plan.base_image) is None
    ):
        # opsctl's own local base is built, never pulled: a fresh machine gets it here.
        on_event(BuildEvent(text=f"{the_plan.base_image} is absent: building it first "
                            "(debootstrap + docker import, about a minute)"))
        baseimage.build_debian_base(engine, force=False, on_event=on_event)
    return builder.build(the_plan, engine, force=force, on_event=on_event)


def check_bases(the_plans: list[BuildPlan], engine: Engine,
                driver: str | None) -> list[basecheck.BaseNote]:
    """Before any build: every plan's base is on the engine (BuildError, exit 3, naming the tag,
    the `docker pull` and the alternatives) and what its CUDA asks of `driver` (the host's
    NVIDIA driver, basecheck.host_driver()). opsctl's own Debian base is built when absent."""
    return basecheck.check_bases([(p.base_image, p.sglang_version) for p in the_plans], engine,
                                 driver, built_here=[baseimage.DEBIAN_BASE])


def push_repository(value: str) -> str:
    """`build --push`'s REGISTRY/REPO, checked before anything is built (UsageError)."""
    return registry.check_repository(value)


def push(result: BuildResult, engine: Engine, repository: str, on_event: OnEvent) -> PushResult:
    """Push a built and verified image as REPOSITORY:<its tag>; the registry's digest is recorded
    for `opsctl render` (opsctl.image.registry.pushed_reference)."""
    return registry.push(engine, result, repository, on_event)


def base_image(engine: Engine, sglang_standin: str | None, force: bool,
               on_event: OnEvent) -> list[BaseImageResult]:
    """The local Debian base, and the sglang stand-in of a version when asked for."""
    results = [baseimage.build_debian_base(engine, force=force, on_event=on_event)]
    if sglang_standin:
        results.append(
            baseimage.build_standin(engine, sglang_standin, force=force, on_event=on_event)
        )
    return results


def patch_check(sglang_src: Path | None, sglang_version: str | None,
                version: str | None) -> CheckReport:
    """Apply a patch set to a temporary copy of a tree, or of the release's real wheel."""
    if sglang_src is not None and sglang_version is None:
        return patchset.check(sglang_src, version or _tree_version(sglang_src))
    if sglang_version is not None and sglang_src is None:
        return upstream.check_release(sglang_version, version)
    raise UsageError("give exactly one of --sglang-src DIR and --sglang-version X",
                     hint="opsctl patch check --sglang-version 0.5.23")


def patch_apply(sglang_src: Path, version: str | None) -> CheckReport:
    """Verify, then patch a real sglang tree in place (the build's code path)."""
    return patchset.apply(sglang_src, patchsets.patch_set_dir(version or _tree_version(sglang_src)))


def sglang_args_extract(version: str, wheel_dir: Path | None, output: Path | None) -> Extraction:
    """Record the real parser of sglang `version` (wheel from `wheel_dir` or the wheel cache)."""
    return extract(version, wheel_dir, output)


def sglang_args_stack(version: str, wheel_dir: Path | None, output: Path | None
                      ) -> stack.StackRecord:
    """Record the image stack of sglang `version`: its pins, and its transformers on the model
    configs."""
    return stack.generate(version, wheel_dir, output)


def _tree_version(src: Path) -> str:
    found = patchset.tree_version(src)
    if found is None:
        raise UsageError(f"cannot tell the sglang version of {src}",
                         hint="pass --version X, or a directory that holds sglang/")
    return found
