"""`opsctl build`'s look at the bases before anything is built: present on the engine, and
runnable with this host's NVIDIA driver.

A missing base is BuildError (exit 3) naming the tag, the `docker pull` to run and the
alternatives (opsctl never pulls). The GLM profile's base is a release tag public sources show
(v0.5.21-cu130) with the pinned release installed into it at build time (image.install_release,
wheelhouse.py); `--base-image` takes a local image that holds the pinned sglang itself instead.
What the build checks in such a base
(docker/Dockerfile, then imagecheck in a throwaway container): python3; the installed
sglang distribution's version equals the pinned one; GNU patch; every file the patch set
changes has the upstream sha256 the manifest records (so its sglang source is that release's,
unmodified); after the build, the patched files' sha256, their checked-hash .pyc and the
runtime switch. It does not check the base's torch, CUDA or kernels: only serving does.

The driver: a base's CUDA comes from its config (`CUDA_VERSION`, which NVIDIA's CUDA images
set and lmsysorg/sglang images inherit), the host's driver from `nvidia-smi`. A base whose CUDA
needs a newer driver is named before the build (a warning: the image may be built here for
another host). The minimum per CUDA major is NVIDIA's own table, "CUDA Toolkit 11.x, 12.x, and
13.x Minimum and Maximum Required Driver Versions" in the CUDA Compatibility guide
(https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html, Table 1:
13.x >= 580, 12.x >= 525, 11.x >= 450): the minimum for minor version compatibility, which
NVIDIA says runs "with limited feature-set" (e.g. PTX compiled by a newer minor); a CUDA major
outside the table is reported as unresolved, never guessed.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from opsctl.core.errors import BuildError
from opsctl.core.tools import Run, run_tool
from opsctl.engine.api import Engine

CUDA_VERSION_ENV = "CUDA_VERSION"
# NVIDIA's CUDA Compatibility guide, Table 1 (module docstring): CUDA major -> minimum driver.
MINIMUM_DRIVER = {13: 580, 12: 525, 11: 450}
COMPATIBILITY_TABLE = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"
DRIVER_QUERY = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
_VERSION = re.compile(r"^(\d+)\.(\d+)")


def missing_base_hint(ref: str, sglang_version: str | None) -> str:
    """What to do about a base the engine does not have."""
    if ref.startswith("opsctl/"):
        return "build it with `opsctl base-image`"
    holding = f"sglang {sglang_version}" if sglang_version else "the pinned sglang"
    return (f"opsctl never pulls: `docker pull {ref}`, then build again. Without a registry, "
            f"build on a local image that holds {holding}: `opsctl build --base-image IMAGE` "
            "(the build checks its sglang version and the patched files' upstream sha256, not "
            "its CUDA stack; docs/build.md); `opsctl base-image --sglang-standin "
            f"{sglang_version or 'X'}` makes one that builds but cannot serve")


@dataclass(frozen=True)
class BaseNote:
    base: str
    text: str
    warning: bool  # the host cannot run it (else: what could not be checked)


def host_driver(
    run: Run = run_tool, which: Callable[[str], str | None] = shutil.which
) -> str | None:
    """The NVIDIA driver version this host runs (`nvidia-smi`), None without one that answers."""
    if which(DRIVER_QUERY[0]) is None:
        return None
    code, output = run(DRIVER_QUERY)
    lines = [line.strip() for line in output.splitlines() if _VERSION.match(line.strip())]
    return lines[0] if code == 0 and lines else None


def cuda_major(cuda_version: str) -> int | None:
    match = _VERSION.match(cuda_version.strip())
    return int(match.group(1)) if match else None


def driver_note(base: str, env: dict[str, str], driver: str | None) -> BaseNote | None:
    """What the base's CUDA asks of the host driver, when it is short of it or unknown."""
    cuda = env.get(CUDA_VERSION_ENV)
    if cuda is None:
        return None  # not an NVIDIA CUDA image (a stand-in, Debian): nothing to compare
    major = cuda_major(cuda)
    minimum = MINIMUM_DRIVER.get(major) if major is not None else None
    if minimum is None:
        return BaseNote(
            base,
            f"base {base} is CUDA {cuda}: its minimum driver is unresolved "
            f"(not in NVIDIA's table as opsctl records it: {COMPATIBILITY_TABLE})",
            False,
        )
    if driver is None:
        return BaseNote(base, f"base {base} is CUDA {cuda}, which needs an NVIDIA driver >= "
                        f"{minimum}; no nvidia-smi answers here, so this host's driver is not "
                        "checked", False)
    found = _VERSION.match(driver)
    if found and int(found.group(1)) < minimum:
        return BaseNote(base, f"base {base} is CUDA {cuda}, which needs an NVIDIA driver >= "
                        f"{minimum} ({COMPATIBILITY_TABLE}); this host runs {driver}: the image "
                        f"builds, but its server needs an R{minimum}+ driver here (or NVIDIA's "
                        "forward-compatibility package, on GPUs that support it)", True)
    return None


def check_bases(bases: Iterable[tuple[str, str]], engine: Engine, driver: str | None,
                built_here: Iterable[str] = ()) -> list[BaseNote]:
    """Every (base, sglang version) present (BuildError naming the first missing one, before
    anything is built), and each one's driver note. `built_here`: bases `build` makes itself."""
    notes: list[BaseNote] = []
    skip = set(built_here)
    for base, version in bases:
        if base in skip:
            continue
        env = engine.image_env(base)
        if env is None:
            raise BuildError(f"base image {base} is not present on this engine",
                             hint=missing_base_hint(base, version))
        note = driver_note(base, env, driver)
        if note is not None:
            notes.append(note)
    return notes
