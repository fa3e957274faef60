"""Local base images, for a machine that cannot reach any image registry (CI, this repo's tests).

Two images, both built here and never pulled:

* `opsctl/debian-base:bookworm` - a minimal Debian rootfs made with
  `debootstrap --variant=minbase bookworm` (plus python3, pip, patch and ca-certificates),
  brought into the engine with `docker import`. It is the simulator profile's base and the
  bottom of the stand-in below. debootstrap needs root and the Debian mirror that this host's
  apt already uses (read from its sources at run time; no mirror is written into the repo).
* `opsctl/sglang-standin:<version>` - that base plus the *real* sglang wheel of the pinned
  version installed with `--no-deps`: the same sglang source files as the release image, none
  of its CUDA stack. `opsctl build --base-image opsctl/sglang-standin:<version>` runs the
  production Dockerfile on it unchanged, so the patch set is applied and verified against the
  real upstream files without a GPU or a registry.

Both carry `opsctl.managed=true` and `opsctl.role` labels (the stand-in also says it is a
stand-in) and are skipped when present unless `force`: CI builds them once and caches them by tag.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opsctl import __version__
from opsctl.core import labels, wheels
from opsctl.core.errors import BuildError, UsageError
from opsctl.core.paths import project_root
from opsctl.core.tools import run_lines
from opsctl.engine.api import BuildEvent, Engine

DEBIAN_REPOSITORY = "opsctl/debian-base"
DEBIAN_SUITE = "bookworm"
DEBIAN_BASE = f"{DEBIAN_REPOSITORY}:{DEBIAN_SUITE}"
STANDIN_REPOSITORY = "opsctl/sglang-standin"
STANDIN_DOCKERFILE = "docker/sglang-standin.Dockerfile"
# python3-pip is here so images can install wheels staged from the host (never from an index).
DEBIAN_PACKAGES = ("python3", "python3-pip", "patch", "ca-certificates")
# opsctl.role values of the two local bases (a rebuilt one may be re-locked: see lock.py)
ROLE_BASE = "base"
ROLE_STANDIN = "sglang-standin"
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
DEBOOTSTRAP_TIMEOUT_SECONDS = 1800

_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*([.+-][0-9A-Za-z.]+)?$")


@dataclass(frozen=True)
class BaseImageResult:
    ref: str
    image_id: str
    skipped: bool


def standin_ref(sglang_version: str) -> str:
    """opsctl/sglang-standin:<version>; UsageError for anything that is not a version."""
    if not _VERSION.match(sglang_version):
        raise UsageError(f"not a version: {sglang_version!r}", hint="e.g. 0.5.23")
    return f"{STANDIN_REPOSITORY}:{sglang_version}"


def debian_mirror(sources: tuple[Path, ...] = APT_SOURCES) -> str:
    """The Debian archive URL this host's apt uses (deb822 `URIs:` or one-line `deb URL
    bookworm`)."""
    for path in sources:
        if not path.is_file():
            continue
        mirror = parse_debian_mirror(path.read_text())
        if mirror:
            return mirror
    raise BuildError(
        "no Debian mirror found in this host's apt sources",
        hint="add a bookworm entry to /etc/apt/sources.list(.d/debian.sources), "
        "or build the base on a Debian host",
    )


def parse_debian_mirror(text: str) -> str | None:
    """First archive (not -security, not -updates-only) URI serving bookworm in an apt
    sources file."""
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        suites = fields.get("suites", "").split()
        if DEBIAN_SUITE in suites and fields.get("uris"):
            return fields["uris"].split()[0]
    for line in text.splitlines():
        parts = line.split()
        # deb [options] URL SUITE COMPONENTS...
        if not parts or parts[0] != "deb":
            continue
        words = [p for p in parts[1:] if not p.startswith("[") and not p.endswith("]")]
        if len(words) >= 2 and words[1] == DEBIAN_SUITE:
            return words[0]
    return None


def build_debian_base(
    engine: Engine, force: bool, on_event: Callable[[BuildEvent], None]
) -> BaseImageResult:
    existing = engine.image_id(DEBIAN_BASE)
    if existing and not force:
        on_event(
            BuildEvent(text=f"{DEBIAN_BASE} is present ({existing[:19]}); --force rebuilds it")
        )
        return BaseImageResult(DEBIAN_BASE, existing, skipped=True)
    if os.geteuid() != 0:
        raise BuildError(
            f"building {DEBIAN_BASE} needs root (debootstrap creates device nodes and chowns "
            "files)",
            hint="run `sudo opsctl base-image` once; later builds reuse the image",
        )
    if shutil.which("debootstrap") is None:
        raise BuildError("debootstrap is not installed", hint="apt-get install debootstrap")
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(prefix="opsctl-rootfs-") as work:
        rootfs = Path(work) / "rootfs"
        argv = [
            "debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}",
            DEBIAN_SUITE, str(rootfs), mirror,
        ]
        on_event(BuildEvent(text=" ".join(argv), step="debootstrap"))
        _run_logged(argv, on_event, step="debootstrap")
        _strip_rootfs(rootfs)
        tarball = Path(work) / "rootfs.tar"
        on_event(BuildEvent(text=f"docker import -> {DEBIAN_BASE}", step="import"))
        # GNU tar keeps device nodes, hard links and numeric owners exactly as debootstrap
        # made them.
        _run_logged(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."],
                    on_event, step="tar")
        changes = [
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "ENV LANG=C.UTF-8",
            'CMD ["/bin/bash"]',
            # Dockerfile syntax: a quoted (JSON-escaped) value may contain spaces.
            *(f"LABEL {key}={json.dumps(value)}" for key, value in _base_labels().items()),
        ]
        image_id = engine.import_rootfs(tarball, DEBIAN_REPOSITORY, DEBIAN_SUITE, changes)
    on_event(BuildEvent(text=f"built {DEBIAN_BASE} ({image_id[:19]})"))
    return BaseImageResult(DEBIAN_BASE, image_id, skipped=False)


def _base_labels() -> dict[str, str]:
    return {
        labels.MANAGED: labels.TRUE,
        labels.ROLE: ROLE_BASE,
        labels.VERSION: __version__,
        "org.opencontainers.image.title": DEBIAN_BASE,
        "org.opencontainers.image.description": f"debootstrap --variant=minbase {DEBIAN_SUITE} "
        f"+ {' '.join(DEBIAN_PACKAGES)}",
    }


def _strip_rootfs(rootfs: Path) -> None:
    """Drop what only the bootstrap needed: downloaded .debs and apt lists (smaller, no stale
    index)."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*"):
        for path in rootfs.glob(pattern):
            path.unlink()


def _run_logged(argv: list[str], on_event: Callable[[BuildEvent], None], step: str) -> None:
    """Run a step, each line of its output an event as it comes (core/tools.run_lines: lines
    cut at their cap, the step killed with its session at DEBOOTSTRAP_TIMEOUT_SECONDS)."""
    tail: list[str] = []

    def line(text: str) -> None:
        tail[:] = [*tail[-19:], text]
        on_event(BuildEvent(text=text, step=step))

    code = run_lines(argv, DEBOOTSTRAP_TIMEOUT_SECONDS, line)
    if code != 0:
        last = next((t for t in reversed(tail) if t.strip()), "no output")
        on_event(BuildEvent(text=last, step=step, error=last))
        raise BuildError(
            f"{step} failed (exit {code}): {last}", hint="the log tail above shows why"
        )


# --- the sglang stand-in ------------------------------------------------------------------------


def build_standin(
    engine: Engine, sglang_version: str, force: bool, on_event: Callable[[BuildEvent], None]
) -> BaseImageResult:
    ref = standin_ref(sglang_version)
    existing = engine.image_id(ref)
    if existing and not force:
        on_event(BuildEvent(text=f"{ref} is present ({existing[:19]}); --force rebuilds it"))
        return BaseImageResult(ref, existing, skipped=True)
    base = build_debian_base(engine, force=False, on_event=on_event)
    wheel = wheels.fetch("sglang", sglang_version)
    standin_labels = {
        labels.MANAGED: labels.TRUE,
        labels.ROLE: ROLE_STANDIN,
        labels.STANDIN: labels.TRUE,
        labels.SGLANG_VERSION: sglang_version,
        labels.BASE_DIGEST: base.image_id,
        "org.opencontainers.image.title": ref,
        "org.opencontainers.image.description": (
            f"STAND-IN for the sglang {sglang_version} release image: Debian {DEBIAN_SUITE} + "
            f"the real {wheel.name} installed --no-deps; no CUDA, torch or kernels. For tests only."
        ),
        "org.opencontainers.image.version": sglang_version,
    }
    with tempfile.TemporaryDirectory(prefix="opsctl-standin-") as work:
        context = Path(work)
        shutil.copy2(project_root() / STANDIN_DOCKERFILE, context / "Dockerfile")
        shutil.copy2(wheel, context / wheel.name)
        image_id = engine.build(
            context_dir=context,
            dockerfile="Dockerfile",
            tag=ref,
            build_args={"BASE_IMAGE": base.image_id, "SGLANG_WHEEL": wheel.name,
                        "SGLANG_VERSION": sglang_version},
            labels=standin_labels,
            on_event=on_event,
        )
    return BaseImageResult(ref, image_id, skipped=False)
