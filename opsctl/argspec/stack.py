"""What a pinned sglang release's image holds, and whether its transformers loads the model.

sglang loads a checkpoint's `config.json` through transformers' `AutoConfig` before anything else
(0.5.23 `get_config`, `srt/utils/hf_transformers/config.py:336`), so a release whose pinned
transformers does not know the model's `model_type` cannot serve it at all, minutes into an 8-GPU
start. The release images install sglang with its pins, so the image holds
the transformers the wheel's METADATA pins with `==`.

`opsctl sglang-args stack --version V` records, from the real wheels and by running the real code:
the release's `==` pins, and for each checkpoint opsctl has a profile for (the GLM-5 family: a
`config.json` written from each card, tests/fixtures/glm5*) what that transformers' `AutoConfig`
makes of it. The record is
`patches/sglang/<version>/stack.json`; profile validation reads it (config/profiles.py) and CI makes
it again from the wheels and compares (tests/integration/test_stack_records.py).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl.argspec import spec as sglang_args
from opsctl.argspec.extract import ensure_wheel, recorded_wheel_name
from opsctl.core import wheels
from opsctl.core.errors import BuildError, UsageError
from opsctl.core.files import atomic_write_text, check_output_path, sha256_file
from opsctl.core.paths import RELEASES_DIR, project_root, release_dir, require_checkout

STACK_FORMAT = 2  # 2: models keyed by checkpoint (model.repo), not by architecture
STACK_FILE = "stack.json"
PROBE = Path(__file__).with_name("stack_probe.py")
PROBE_TIMEOUT_S = 120
# The model configs every record is checked against, by the checkpoint (`model.repo` of a
# profile) whose public card each was written from: a directory with config.json and a README
# naming its sources. One architecture, three members: each member's keys are probed apart.
MODEL_CONFIGS = {
    "nvidia/GLM-5-NVFP4": Path("tests/fixtures/glm5"),
    "nvidia/GLM-5.1-NVFP4": Path("tests/fixtures/glm51"),
    "nvidia/GLM-5.2-NVFP4": Path("tests/fixtures/glm52"),
}


def stack_path(version: str) -> Path:
    return release_dir(version) / STACK_FILE


def stack_command(version: str) -> str:
    return f"opsctl sglang-args stack --version {version}"


@dataclass(frozen=True)
class StackRecord:
    version: str
    path: Path
    transformers: str | None
    models: dict[str, dict[str, Any]]

    def model_problem(self, repo: str | None, architecture: str) -> str | None:
        """Why this release's image cannot load the checkpoint's config, or None (also when
        unknown). The checkpoint's own record decides; a checkpoint without one is refused only
        when the config of every recorded checkpoint of its architecture failed to load."""
        found = self.models.get(repo or "")
        if found is None:
            same = [entry for entry in self.models.values()
                    if entry.get("architecture") == architecture]
            if not same or any(entry.get("loads", True) for entry in same):
                return None
            found = same[0]
        if found.get("loads", True):
            return None
        error = str(found.get("error") or "").split(". ")[0]
        what = f"{repo}'s" if repo in self.models else f"a {architecture}"
        return (
            f"sglang {self.version}'s image holds transformers {self.transformers} (the wheel's "
            f"pin), which cannot load {what} config.json: {error} "
            f"(executed on {found.get('config')}; recorded in "
            f"{RELEASES_DIR}/{self.version}/{STACK_FILE})"
        )


def metadata_pins(wheel: Path) -> dict[str, str]:
    """`==` pins of the wheel's unconditional requirements (`Requires-Dist: name==X`), by name.

    A pin with extras (0.5.23's `flashinfer_python[cu13]==0.7.2`) is recorded under the
    distribution's name; what the extras themselves require is not followed.
    """
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            text = archive.read(name).decode()
    except (zipfile.BadZipFile, StopIteration, OSError, UnicodeDecodeError):
        raise BuildError(
            f"{wheel} has no readable METADATA", hint="delete it and run again"
        ) from None
    pins: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist: ") or ";" in line:
            continue
        requirement = line.removeprefix("Requires-Dist: ").replace(" ", "")
        requirement = re.sub(r"\[[A-Za-z0-9_.,-]*\]", "", requirement, count=1)
        if requirement.count("==") == 1 and not any(c in requirement for c in "<>,![~"):
            package, version = requirement.split("==")
            pins[package.lower().replace("_", "-")] = version
    return dict(sorted(pins.items()))


def side_env(requirement: str, cache: Path | None = None) -> Path:
    """A directory holding `requirement` and its dependencies for this interpreter (pip --target),
    made once in the wheel cache and reused; BuildError when pip fails."""
    name, version = requirement.split("==")
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    target = (cache or wheels.cache_dir()) / "envs" / f"{name}-{version}-{tag}"
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--only-binary=:all:", "--target", str(staging), requirement]
    hint = f"check that PyPI is reachable (pip install --target {target} {requirement})"
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=wheels.PIP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        raise BuildError(f"pip install {requirement} timed out", hint=hint) from None
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BuildError(f"pip install {requirement} failed: {last}", hint=hint)
    (staging / ".complete").write_text(requirement + "\n")
    try:
        staging.rename(target)
    except OSError:  # another run made it first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def probe_configs(env_dir: Path, config_dirs: list[Path]) -> dict[str, Any]:
    """Run stack_probe.py with the transformers in `env_dir` on each config directory."""
    command = [sys.executable, "-S", "-I", "-B", str(PROBE), str(env_dir), *map(str, config_dirs)]
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            env={"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent"},
        )
    except subprocess.TimeoutExpired:
        raise BuildError(
            "the transformers config probe timed out", hint=f"run {PROBE} by hand"
        ) from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BuildError(f"the transformers config probe failed: {last}",
                         hint=f"{env_dir} may be incomplete: delete it and run again")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def generate(
    version: str, wheel_dir: Path | None = None, output: Path | None = None
) -> StackRecord:
    """Make the stack record of sglang `version` from the real wheels and write it."""
    if not sglang_args.VERSION_RE.match(version):
        raise UsageError(f"{version!r} is not a sglang version", hint="e.g. --version 0.5.23")
    if output is not None:
        check_output_path(output, "--output")  # before the wheel and pip, not after
    else:
        require_checkout(f"recording sglang {version}'s stack", "--output")
    cache = wheel_dir or wheels.cache_dir()
    wheel = ensure_wheel(version, cache, recorded_wheel_name(sglang_args.spec_path(version)))
    pins = metadata_pins(wheel)
    record: dict[str, Any] = {
        "format": STACK_FORMAT,
        "sglang_version": version,
        "provenance": {"wheel": wheel.name, "wheel_sha256": sha256_file(wheel),
                       "command": stack_command(version)},
        "pins": pins,
        "transformers": None,
        "models": {},
    }
    if "transformers" in pins:
        env = side_env(f"transformers=={pins['transformers']}", cache)
        root = project_root()
        dirs = {repo: root / rel for repo, rel in MODEL_CONFIGS.items()}
        probed = probe_configs(env, list(dirs.values()))
        record["transformers"] = probed["transformers"]
        record["models"] = {repo: {"config": str(MODEL_CONFIGS[repo] / "config.json"),
                                   "architecture": _architecture(path),
                                   **probed["configs"][str(path)]} for repo, path in dirs.items()}
    target = output or stack_path(version)
    atomic_write_text(target, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return _record(version, target, record)


def _architecture(config_dir: Path) -> str:
    """The first of `architectures` in a shipped config.json (opsctl's own fixture)."""
    return str(json.loads((config_dir / "config.json").read_text())["architectures"][0])


def _record(version: str, path: Path, data: dict[str, Any]) -> StackRecord:
    return StackRecord(version=version, path=path, transformers=data.get("transformers"),
                       models=dict(data.get("models") or {}))


def load(version: str) -> StackRecord | None:
    """The committed stack record of `version`, or None where none was made."""
    path = stack_path(version)
    try:
        stat = path.stat()
    except OSError:
        return None
    return _read(str(path), version, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _read(path: str, version: str, mtime_ns: int, size: int) -> StackRecord | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != STACK_FORMAT:
        return None
    return _record(version, Path(path), data)
