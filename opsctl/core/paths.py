"""Where opsctl finds its project files: profiles (deploy/), Dockerfiles (docker/), the pinned
sglang releases (patches/sglang/<version>/: each one's patch set and records), monitoring files
(monitoring/) and the GLM-5 config fixture `profile resolve` defaults to.

Three layouts, decided in this order:

- `$OPSCTL_PROJECT_DIR`: a project copy holding those folders and its own `opsctl/` sources;
- a checkout: the folders sit beside the `opsctl/` package (an editable install, or
  `PYTHONPATH=<checkout>`);
- an installed wheel (`pipx install`, `uv tool install`, `pip install opsctl-*.whl`): the wheel
  carries them as `opsctl/_data/<folder>` (setup.py copies `PACKAGED` there at build time).

`project_root()` is where the data folders are; `source_root()` is the directory holding the
`opsctl` package whose files go into images (the simulator's modules, the patch set's kernel).
Standard library only: setup.py reads `PACKAGED` from this file before opsctl is installed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR_ENV = "OPSCTL_PROJECT_DIR"
STATE_DIR_ENV = "OPSCTL_STATE_DIR"
# The project's data, as paths relative to the project root: what a wheel carries under
# opsctl/_data/ (the same relative paths there), and what marks a checkout.
PACKAGED = ("deploy", "docker", "monitoring", "patches", "tests/fixtures/glm5",
            "tests/fixtures/glm51", "tests/fixtures/glm52")
# Never packaged: host state a checkout keeps beside its profiles, what .gitignore keeps out of
# these folders (the simulator's base digest: its base is built on each host). Committed locks
# are packaged.
NOT_PACKAGED = ("deploy/locks/sim.json",)
DATA_DIR = "_data"  # the wheel's data folder, inside the opsctl package
# One folder per pinned sglang release, relative to the project root: its patch set
# (manifest.json and the files the manifest lists: all the patch set's identity covers) beside
# its records (cli-args.json, stack.json, defaults.json, resolved/<profile>.<variant>.json).
# opsctl.sim, an island, keeps its own copy of this path (a unit test compares the two).
RELEASES_DIR = "patches/sglang"

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # .../opsctl


CHECKOUT = "checkout"
PROJECT_COPY = "project dir"
INSTALLED = "installed package"


@dataclass(frozen=True)
class Layout:
    """Which layout is in use, where its data folders are and where its opsctl sources are."""

    kind: str  # CHECKOUT, PROJECT_COPY or INSTALLED
    data: Path
    source: Path


def _is_project(root: Path) -> bool:
    return all((root / rel).is_dir() for rel in PACKAGED)


@functools.cache
def _found() -> Layout:
    """The checkout beside the package, else the wheel's data (decided once per process)."""
    checkout = PACKAGE_DIR.parent
    if _is_project(checkout):
        return Layout(CHECKOUT, checkout, checkout)
    # Whether or not the wheel's data is complete: a missing file is named where it is read.
    return Layout(INSTALLED, PACKAGE_DIR / DATA_DIR, PACKAGE_DIR.parent)


def layout() -> Layout:
    override = os.environ.get(PROJECT_DIR_ENV)
    if override:
        root = Path(override).resolve()
        return Layout(PROJECT_COPY, root, root)
    return _found()



def project_root() -> Path:
    """The directory holding deploy/, docker/, patches/ and monitoring/."""
    return layout().data


def releases_root() -> Path:
    """The folder holding one folder per pinned sglang release (`RELEASES_DIR`)."""
    return project_root() / RELEASES_DIR


def release_dir(version: str) -> Path:
    """The folder of pinned sglang release `version`: its patch set and its records."""
    return releases_root() / version


def source_root() -> Path:
    """The directory holding the `opsctl` package whose source files images are built from."""
    return layout().source


def is_installed() -> bool:
    """True when the data is the wheel's own copy (read-only to opsctl: host state goes to the
    state directory instead, and the checkout's maintainer writes are refused)."""
    return layout().kind == INSTALLED


def require_checkout(what: str, option: str | None = None) -> None:
    """Refuse `what`, a maintainer's rewrite of the project's committed files, when they are
    the installed wheel's own copy (`option` names the way to write elsewhere instead)."""
    if is_installed():
        from opsctl.core.errors import UsageError  # here: setup.py runs this file on its own

        alternative = f", or pass {option}" if option else ""
        raise UsageError(
            f"{what} rewrites the project's files; this opsctl runs from an installed package "
            f"({project_root()})",
            hint=f"run it from a checkout of opsctl (or set {PROJECT_DIR_ENV} to one){alternative}",
        )


def default_state_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where opsctl keeps this host's state, the one truth every reader asks (verdicts, locks,
    trust records, the monitoring stack's config, fetched datasets): $OPSCTL_STATE_DIR, else
    $XDG_STATE_HOME/opsctl (when absolute, as the spec requires), else ~/.local/state/opsctl."""
    if environ.get(STATE_DIR_ENV):
        return Path(environ[STATE_DIR_ENV])
    xdg = environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "opsctl"
