"""The release overlay's wheelhouse: the pinned sglang wheel and every `==` pin of its METADATA.

A profile whose `image.install_release` is on builds on a base that holds another sglang release
(a tag a public source shows) and brings the pinned release into it. What to install comes from
one place: the sglang wheel that `patches/sglang/<version>/stack.json` was recorded from (its
file name and sha256 are the record's provenance; a cached wheel with other bytes is refused),
and the pins the record read from that wheel's own METADATA: every unconditional
`Requires-Dist: name==X`, extras included (`flashinfer_python[cu13]==0.7.2` pins
flashinfer-python 0.7.2). Nothing here types a version.

`release()` runs at plan time and reads only the stack record (no engine, no wheel, no network:
`doctor` and `up` plan too): the pins and the wheel's sha256 are part of the image's
expectations and so of its content hash. `stage()` runs when the build context is staged: the
release wheel is checked against the record's sha256, then each pinned wheel is taken from the
wheel cache, or `pip download --no-deps`ed into it by exact version (pip's own index settings
apply, e.g. PIP_EXTRA_INDEX_URL for PyTorch's CUDA 13 index), copied to `opsctl-build/wheels/`,
and its sha256 written to `opsctl-build/wheels.json` (and build.json). Every cached wheel of a
pinned version is staged, whatever its Python and platform tags: pip in the image picks the one the
base's interpreter can install. Inside the build, overlay.py compares each pin with the base's
installed version and installs only those that differ, `--no-index --no-deps`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from opsctl.argspec import stack
from opsctl.argspec.extract import ensure_wheel
from opsctl.core import wheels
from opsctl.core.errors import BuildError
from opsctl.core.files import sha256_file

WHEELS_DIR = "wheels"  # under opsctl-build/ in the context, /opt/opsctl/build/ in the image
WHEELS_RECORD = "wheels.json"
# The versions `build` names when it proves an overlaid image (every pin is proven; these are
# the ones docs/build.md lists).
HEADLINE = ("sglang", "torch", "transformers", "flashinfer-python", "sglang-kernel")


def normal(name: str) -> str:
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> dict[str, Any]:
    """What the overlay installs, from the stack record alone (no wheel is read or fetched):
    {"wheel", "wheel_sha256", "pins": {"sglang": version, distribution: version, ...}}."""
    path = stack.stack_path(version)
    try:
        data = json.loads(path.read_text())
        provenance, pins = data["provenance"], dict(data["pins"])
        recorded, recorded_sha = str(provenance["wheel"]), str(provenance["wheel_sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        raise BuildError(f"image.install_release needs sglang {version}'s stack record "
                         f"({path}), which names the release wheel and its pins",
                         hint=f"{stack.stack_command(version)} (maintainers)") from None
    return {"wheel": recorded, "wheel_sha256": recorded_sha,
            "pins": {"sglang": version, **{str(k): str(v) for k, v in pins.items()}}}


def release_wheel(overlay: dict[str, Any], cache: Path) -> Path:
    """The release wheel the stack record was made from, in `cache` (fetched once); BuildError
    when the cached file has other bytes."""
    version = overlay["pins"]["sglang"]
    wheel = ensure_wheel(version, cache, overlay["wheel"])
    found = sha256_file(wheel)
    if found != overlay["wheel_sha256"]:
        raise BuildError(f"{wheel} has sha256 {found[:16]}..., but sglang {version}'s stack "
                         f"record was made from {overlay['wheel']} with sha256 "
                         f"{overlay['wheel_sha256'][:16]}...",
                         hint="delete the cached wheel so pip fetches the release's own again")
    return wheel


def cached(cache: Path, name: str, version: str) -> list[Path]:
    """Every wheel of `name`==`version` in `cache`, any tags (a local label like +cu130 matches
    a pin without one, as pip's == does)."""
    found = []
    for wheel in sorted(cache.glob("*.whl")):
        match = wheels.WHEEL_NAME.match(wheel.name)
        if match and normal(match["name"]) == normal(name) \
                and match["version"].split("+", 1)[0] == version:
            found.append(wheel)
    return found


def stage(overlay: dict[str, Any], build_dir: Path, cache: Path | None = None) -> dict[str, str]:
    """Copy every pinned wheel into `build_dir`/wheels and record their sha256 there; returns
    {file name: sha256}. BuildError when a pin has no wheel and pip cannot fetch one."""
    cache = cache or wheels.cache_dir()
    release_wheel(overlay, cache)
    target = build_dir / WHEELS_DIR
    target.mkdir(parents=True, exist_ok=True)
    staged: dict[str, str] = {}
    for name, version in sorted(overlay["pins"].items()):
        found = cached(cache, name, version)
        if not found:
            wheels.download(cache, f"{name}=={version}")
            found = cached(cache, name, version)
        if not found:
            raise BuildError(f"pip did not produce a {name} {version} wheel in {cache}",
                             hint=f"pip download --no-deps --only-binary=:all: {name}=={version} "
                             f"-d {cache} (with the base's --python-version and --platform)")
        for wheel in found:
            if name == "sglang":
                _same_pins(wheel, overlay)
            shutil.copyfile(wheel, target / wheel.name)  # a copy: the context's mtimes are set
            staged[wheel.name] = sha256_file(target / wheel.name)
    if staged.get(overlay["wheel"]) != overlay["wheel_sha256"]:
        raise BuildError(f"{overlay['wheel']} changed in {cache} while staging",
                         hint="run the build again")
    record = {"pins": overlay["pins"], "wheels": staged}
    (build_dir / WHEELS_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return staged


def _same_pins(wheel: Path, overlay: dict[str, Any]) -> None:
    """Another wheel of the release (another Python's) must pin what the recorded one pins."""
    pins = {"sglang": overlay["pins"]["sglang"], **stack.metadata_pins(wheel)}
    if pins != overlay["pins"]:
        differ = sorted(set(pins.items()) ^ set(overlay["pins"].items()))[0][0]
        raise BuildError(f"{wheel.name} pins {differ} {pins.get(differ, '(nothing)')}, but the "
                         f"stack record's {overlay['wheel']} pins "
                         f"{overlay['pins'].get(differ, '(nothing)')}",
                         hint=f"remove {wheel} from the wheel cache, or record that wheel's stack")
