"""Run a pinned sglang release's own ServerArgs resolution offline, on CPU, from the real wheel.

The wheel comes from the wheel cache (opsctl.core.wheels) and is unpacked once under
`<cache>/resolve/`; beside it, a side environment of real packages is installed once by pip
(`--target`): the transformers (and tokenizers) the wheel's METADATA pins with `==`, the
parser probe's PROBE_DEPENDENCIES, pillow (sglang registers image processors at import) and
torch's pure-Python dependencies. torch itself is a CPU build (TORCH_CPU): opsctl's own when its
environment has one (scripts/setup.sh installs it into a checkout's .venv), linked in; else (an
installed opsctl: pipx, uv tool) pip installs it once beside the side environment from PyTorch's
CPU index, and says so first. sglang 0.5.23 pins torch 2.14.1, whose only PyPI build is the ~1 GB
CUDA one; resolution only needs torch's dtypes and `torch.cuda`'s device queries, which
`resolve_probe.py` answers with the GPU it is told to report. Every record says so
(`TORCH_CHOICE`). Whatever is downloaded (the sglang wheel, the side environment, torch) is
announced through `on_note` before pip starts.

Everything here is bounded: pip and the probe run under timeouts, caches appear whole (built
beside, renamed into place) or not at all.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from opsctl.argspec import extract
from opsctl.core import wheels
from opsctl.core.errors import BuildError, UsageError

PROBE = Path(__file__).with_name("resolve_probe.py")
PROBE_TIMEOUT_S = 300
PIP_TIMEOUT_S = 900
# Installed for real next to the wheel's own transformers/tokenizers pins.
SIDE_PACKAGES = (*extract.PROBE_DEPENDENCIES, "pillow==13.0.0",
                 "sympy", "networkx", "jinja2", "filelock", "fsspec")
# Versions of everything pip may pull in beside them, so the side environment (and so which
# modules are real and which are placeholders) is the same on every machine. Those pip
# installed with transformers 5.19.0 here; a pin of another release that needs other versions
# makes pip fail (exit 3) until this list is extended.
SIDE_CONSTRAINTS = (
    "annotated-doc==0.0.7", "annotated-types==0.8.0", "anyio==4.16.0",
    "certifi==2026.10.19.post1", "click==8.5.1", "filelock==4.3.1", "fsspec==2026.9.0",
    "h11==0.16.0", "hf-xet==1.8.0", "httpcore==1.0.9", "httpx==0.28.1",
    "huggingface-hub==1.33.0", "idna==3.20", "jinja2==3.1.6", "markdown-it-py==4.3.0",
    "markupsafe==3.0.4", "mdurl==0.1.2", "mpmath==1.3.0", "networkx==3.6.1", "numpy==2.4.6",
    "pydantic==2.14.4", "pydantic-core==2.50.5", "pygments==2.21.0", "pyyaml==6.0.4",
    "regex==2026.11.19", "rich==15.0.0", "safetensors==0.8.0", "shellingham==1.5.4",
    "sympy==1.14.0", "tqdm==4.70.1", "typer==0.29.2", "typing-inspection==0.4.5",
)
# torch's own importable top levels, linked from opsctl's environment.
TORCH_TOP_LEVELS = ("torch", "torchgen", "functorch")
TORCH_CHOICE = (
    "real CPU torch from opsctl's environment, not the release's pin: only torch.cuda's device "
    "queries and torch.version.cuda are faked (see `faked`); the pinned CUDA build is not "
    "installable on a CPU machine and nothing in the resolution runs a kernel"
)
# The CPU torch resolution runs with (scripts/setup.sh installs this pin into .venv too), and
# where pip finds it when opsctl's environment has none: torch's Linux builds on PyPI are CUDA
# ones, PyTorch's own CPU index serves the CPU build.
TORCH_CPU = "torch==2.13.0"
TORCH_CPU_SOURCE = ("--index-url", "https://download.pytorch.org/whl/cpu")
Note = Callable[[str], None]


def _quiet(line: str) -> None:
    """The default `on_note`: say nothing."""


@dataclass(frozen=True)
class GpuReport:
    """The GPU that torch.cuda reports to sglang in the probe."""

    name: str
    count: int
    memory_gb: float  # GiB per GPU, as torch.cuda.mem_get_info's total
    capability: tuple[int, int]
    cuda: str  # torch.version.cuda


@dataclass(frozen=True)
class Probed:
    """What the probe returned, plus where its inputs came from."""

    dump: dict[str, Any]
    wheel: str
    wheel_sha256: str
    pins: dict[str, str]
    side_packages: list[str]  # dist-name==version of every package the side env holds


def resolve_argvs(version: str, argvs: list[list[str]], gpu: GpuReport,
                  wheel_dir: Path | None = None, on_note: Note = _quiet) -> Probed:
    """sglang `version`'s resolution of each argv (without the entrypoint; `--model-path DIR`
    first) reporting `gpu`, in one subprocess: `dump["results"]` is in argv order. What is not
    cached yet is downloaded, each download announced through `on_note` first."""
    if not sglang_version_ok(version):
        raise UsageError(f"{version!r} is not a sglang version", hint="e.g. 0.5.23")
    cache = wheel_dir or wheels.cache_dir()
    root = cache / "resolve"
    torch_dir = torch_environment(root, on_note)  # first: no download is wasted without it
    recorded = extract.recorded_wheel_name(_spec_record(version))
    if not _wheel_cached(version, cache, recorded):
        on_note(f"downloading sglang {version}'s wheel from PyPI into {cache} (once)")
    wheel = extract.ensure_wheel(version, cache, recorded)
    wheel_sha = _sha256(wheel)
    source = _unpacked(wheel, root / f"sglang-{version}-{wheel_sha[:16]}")
    pins = extract.pinned_versions(source, version)
    env_dir = side_environment(pins, root, cache, on_note)
    with tempfile.TemporaryDirectory(prefix="opsctl-resolve-") as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps({
            "sglang_dir": str(source), "env_dirs": [str(env_dir), str(torch_dir)],
            "pins": pins, "argvs": argvs, "gpu": asdict(gpu),
        }))
        dump = _run_probe(request, Path(tmp))
    return Probed(dump=dump, wheel=wheel.name, wheel_sha256=wheel_sha, pins=pins,
                  side_packages=installed(env_dir))


def _wheel_cached(version: str, cache: Path, recorded: str | None) -> bool:
    if recorded and (cache / recorded).is_file():
        return True
    return wheels.find(cache, "sglang", version) is not None


def sglang_version_ok(version: str) -> bool:
    from opsctl.argspec.spec import VERSION_RE

    return bool(VERSION_RE.match(version))


def _spec_record(version: str) -> Path:
    from opsctl.argspec.spec import spec_path

    return spec_path(version)


def side_requirements(pins: dict[str, str]) -> list[str]:
    """What pip installs into the side environment for a wheel with these `==` pins."""
    if "transformers" not in pins:
        raise BuildError("the sglang wheel pins no transformers version",
                         hint="resolution needs the transformers the release pins")
    own = [f"transformers=={pins['transformers']}"]
    if "tokenizers" in pins:
        own.append(f"tokenizers=={pins['tokenizers']}")
    return [*own, *SIDE_PACKAGES]


def side_environment(pins: dict[str, str], root: Path, cache: Path,
                     on_note: Note = _quiet) -> Path:
    """The side environment for these pins, installed by pip once (cached, whole or absent)."""
    requirements = side_requirements(pins)
    key = hashlib.sha256(json.dumps(
        [requirements, SIDE_CONSTRAINTS, sys.version_info[:2]]).encode()).hexdigest()
    target = root / f"env-{key[:16]}"
    if (target / ".complete").is_file():
        return target
    on_note(f"installing the resolution environment ({', '.join(requirements[:2])} and "
            f"{len(requirements) - 2} more, from PyPI) into {target} (once)")
    hint = f"check that PyPI is reachable; the side environment installs {' '.join(requirements)}"
    return _pip_install(target, ["--find-links", str(cache)], requirements, hint,
                        constraints=SIDE_CONSTRAINTS)


def torch_environment(root: Path, on_note: Note = _quiet,
                      source: tuple[str, ...] = TORCH_CPU_SOURCE) -> Path:
    """A directory holding torch for the probe: opsctl's own, linked, when its environment has
    one; else TORCH_CPU installed by pip once (from `source`, PyTorch's CPU index), announced
    first."""
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        key = hashlib.sha256(json.dumps([TORCH_CPU, source, sys.version_info[:2]]).encode())
        target = root / f"torch-cpu-{key.hexdigest()[:12]}"
        if (target / ".complete").is_file():
            return target
        on_note(f"opsctl's environment has no torch: installing the CPU build ({TORCH_CPU}, "
                f"{' '.join(source)}) into {target} (once; resolution needs only its dtypes and "
                "device queries)")
        hint = f"check that pip reaches {source[-1]}, or install {TORCH_CPU} (the CPU build) " \
               "into opsctl's environment"
        return _pip_install(target, [*source, "--no-deps"], [TORCH_CPU], hint)
    return _torch_links(root, dist)


def _pip_install(target: Path, options: list[str], requirements: list[str], hint: str,
                 constraints: tuple[str, ...] = ()) -> Path:
    """`pip install --target` into a stage beside `target`, renamed into place when whole
    (marked by `.complete`); BuildError with `hint` when pip fails or times out."""
    root = target.parent
    root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".env-", dir=root))
    pinned = stage.with_name(stage.name + ".constraints.txt")
    pinned.write_text("".join(f"{line}\n" for line in constraints))
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--only-binary=:all:", "--target", str(stage), *options,
               "--constraint", str(pinned), *requirements]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
                                check=False)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise BuildError(f"pip could not install {' '.join(requirements[:2])}"
                             f"{' ...' if len(requirements) > 2 else ''} for the resolution: "
                             f"{last}", hint=hint)
        (stage / ".complete").write_text(json.dumps(requirements) + "\n")
        _replace_dir(stage, target)
    except subprocess.TimeoutExpired:
        raise BuildError(f"pip timed out installing {' '.join(requirements[:2])} for the "
                         "resolution", hint=hint) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        pinned.unlink(missing_ok=True)
    return target


def installed(env_dir: Path) -> list[str]:
    """name==version of each distribution in a --target directory (from its dist-info)."""
    found = []
    for info in sorted(env_dir.glob("*.dist-info")):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        found.append(f"{name.lower().replace('_', '-')}=={version}")
    return found


def _torch_links(root: Path, dist: importlib.metadata.Distribution) -> Path:
    """A directory linking opsctl's own CPU torch (its packages and dist-info)."""
    site = Path(str(dist.locate_file(""))).resolve()
    info = Path(str(dist._path)).name  # type: ignore[attr-defined]
    names = [n for n in (*TORCH_TOP_LEVELS, info) if (site / n).exists()]
    key = hashlib.sha256(json.dumps([str(site), dist.version, names]).encode()).hexdigest()
    target = root / f"torch-{dist.version}-{key[:12]}"
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".torch-", dir=root))
    try:
        for name in names:
            (stage / name).symlink_to(site / name)
        _replace_dir(stage, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return target


def _unpacked(wheel: Path, target: Path) -> Path:
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".wheel-", dir=target.parent))
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(stage)
        _replace_dir(stage, target)
    except zipfile.BadZipFile:
        raise BuildError(f"{wheel} is not a valid wheel", hint="delete it and run again") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return target


def _replace_dir(stage: Path, target: Path) -> None:
    """Rename a finished directory into place; a concurrent winner's copy is kept."""
    try:
        os.rename(stage, target)
    except OSError:
        if not target.is_dir():
            raise


def _sha256(path: Path) -> str:
    from opsctl.core.files import sha256_file

    return sha256_file(path)


def _run_probe(request: Path, cwd: Path) -> dict[str, Any]:
    command = [sys.executable, "-S", "-I", "-B", str(PROBE), str(request)]
    # An empty PATH (no nvidia-smi even on a GPU host: the GPU is the one reported), a fixed
    # locale, a scratch HOME; no SGLANG_* variables.
    empty = cwd / "bin"
    empty.mkdir(exist_ok=True)
    env = {"PATH": str(empty), "LC_ALL": "C.UTF-8", "HOME": str(cwd)}
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd,
                                timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise BuildError("sglang's resolution timed out", hint="see resolve_probe.py") from None
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise BuildError(f"running sglang's resolution failed: {tail}",
                         hint=f"run {PROBE.name} by hand with the request to see the traceback")
    dump: dict[str, Any] = json.loads(result.stdout)
    return dump
