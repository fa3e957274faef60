"""The host's wheel cache: every wheel opsctl uses comes from here, fetched once by pip.

Image builds have no network, patch checks and the parser extraction need the real upstream
files, so wheels are `pip download --no-deps`ed on the host into one cache directory
($OPSCTL_WHEEL_CACHE, default /var/cache/opsctl-wheels for root, a user's ~/.cache/opsctl-wheels)
and reused from there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from opsctl.core.errors import BuildError

WHEEL_CACHE_ENV = "OPSCTL_WHEEL_CACHE"
DEFAULT_WHEEL_CACHE = Path("/var/cache/opsctl-wheels")
PIP_TIMEOUT_S = 600
# PEP 427 file name: name-version[-build]-python-abi-platform.whl
WHEEL_NAME = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


def cache_dir(environ: Mapping[str, str] = os.environ, root: bool | None = None) -> Path:
    """$OPSCTL_WHEEL_CACHE, else the host's cache (/var/cache/opsctl-wheels) for root, else the
    user's ($XDG_CACHE_HOME/opsctl-wheels when absolute, else ~/.cache/opsctl-wheels): an
    installed opsctl run by a user (pipx, uv tool) cannot write under /var/cache."""
    if environ.get(WHEEL_CACHE_ENV):
        return Path(environ[WHEEL_CACHE_ENV])
    as_root = os.geteuid() == 0 if root is None else root
    if as_root:
        return DEFAULT_WHEEL_CACHE
    xdg = environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "opsctl-wheels"


def find(cache: Path, name: str, version: str) -> Path | None:
    """A cached wheel of `name`==`version` that this interpreter can install, or None."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for wheel in sorted(cache.glob(f"{name.replace('-', '_')}-{version}-*.whl")):
        match = WHEEL_NAME.match(wheel.name)
        if match and (match["abi"] in {"none", "abi3"} or tag in match["py"].split(".")):
            return wheel
    return None


def download(cache: Path, requirement: str, *pip_options: str) -> None:
    """`pip download --no-deps` one binary requirement into `cache`; BuildError when pip fails."""
    cache.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--quiet", "-d", str(cache), requirement, *pip_options,
    ]
    hint = f"check that PyPI is reachable, or put the wheel into {cache} " \
           f"(pip download --no-deps {requirement} -d {cache})"
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
                                check=False)
    except subprocess.TimeoutExpired:
        raise BuildError(f"pip download {requirement} timed out", hint=hint) from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BuildError(f"pip download {requirement} failed: {last}", hint=hint)


def fetch(name: str, version: str, cache: Path | None = None) -> Path:
    """The wheel of `name`==`version` for this interpreter: from the cache, else downloaded."""
    cache = cache or cache_dir()
    found = find(cache, name, version)
    if found is None:
        download(cache, f"{name}=={version}")
        found = find(cache, name, version)
    if found is None:
        raise BuildError(f"pip did not produce a {name} {version} wheel for this Python in {cache}",
                         hint=f"pip download --no-deps {name}=={version} -d {cache}")
    return found
