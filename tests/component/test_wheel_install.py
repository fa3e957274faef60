"""opsctl installed from its wheel, outside any checkout, reads the data the wheel carries.

The wheel is built from a copy of the project's sources (pip wheel, this venv's setuptools, no
index), installed into a fresh venv (its dependencies come from this venv's site-packages through
a .pth path entry: the editable install's own hooks are not processed there, so `opsctl` is the
wheel's), and run from an empty directory with no PYTHONPATH and no OPSCTL_PROJECT_DIR.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from opsctl.config.profiles import load_profile
from opsctl.core import paths
from opsctl.core.errors import EXIT_USAGE

ROOT = Path(__file__).resolve().parents[2]
BUILD_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in")
GLM = "glm5-nvfp4-rtx6000"
HOST_LOCK = "deploy/locks/sim.json"  # host state of a checkout (.gitignore): never packaged
COMMITTED_LOCK = f"deploy/locks/{GLM}.json"  # packaged: installed builds check against it
LOCKED = "sha256:" + "ab" * 32  # this test's own lock entry, not a real image's digest


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    data: Path  # the installed package's opsctl/_data
    cwd: Path
    env: dict[str, str]

    def opsctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "opsctl"), *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )


def _copy_sources(dest: Path) -> None:
    """What a wheel build reads: the build files, the package and the data folders, with this
    test's two lock files instead of the checkout's own."""
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, dest / name)
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", paths.DATA_DIR)
    shutil.copytree(ROOT / "opsctl", dest / "opsctl", ignore=junk)
    for rel in paths.PACKAGED:
        shutil.copytree(
            ROOT / rel, dest / rel, ignore=shutil.ignore_patterns("__pycache__", "locks")
        )
    (dest / HOST_LOCK).parent.mkdir(parents=True)
    (dest / HOST_LOCK).write_text('{"bases": {}}\n')
    base = load_profile(GLM).resolve("gathercast").image.base
    entry = {"digest": LOCKED, "kind": "repo-digest"}
    (dest / COMMITTED_LOCK).write_text(json.dumps({"bases": {base: entry}}))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    source, dist, venv, cwd = work / "src", work / "dist", work / "venv", work / "elsewhere"
    for folder in (source, dist, cwd):
        folder.mkdir()
    _copy_sources(source)
    # No PYTHONPATH: a checkout on it would read to pip as opsctl already installed.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", paths.PROJECT_DIR_ENV, "OPSCTL_LOCK_DIR", "OPSCTL_PROFILE")}
    pip = {**env, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        env=pip,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = dist.glob("opsctl-*.whl")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        env=pip,
        timeout=300,
        capture_output=True,
    )
    site = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        ).stdout.strip()
    )
    # The dependencies: this venv's site-packages as a plain path entry, after the venv's own.
    (site / "opsctl-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env.update(OPSCTL_STATE_DIR=str(work / "state"), DOCKER_HOST="unix:///nonexistent/docker.sock")
    return Installed(
        wheel=wheel, venv=venv, data=site / "opsctl" / paths.DATA_DIR, cwd=cwd, env=env
    )


def test_the_wheel_carries_the_data_folders_and_no_host_state(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as archive:
        names = set(archive.namelist())
    for rel in paths.PACKAGED:
        shipped = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / rel).rglob("*")
                         if p.is_file() and "__pycache__" not in p.parts and "locks" not in p.parts)
        assert shipped, rel
        missing = [name for name in [*shipped, COMMITTED_LOCK]
                   if f"opsctl/{paths.DATA_DIR}/{name}" not in names]
        assert not missing, missing
    assert f"opsctl/{paths.DATA_DIR}/{HOST_LOCK}" not in names
    assert not any("__pycache__" in name for name in names)


def test_opsctl_is_the_wheels_and_finds_its_packaged_data(installed: Installed) -> None:
    probe = subprocess.run(
        [
            str(installed.venv / "bin" / "python"),
            "-c",
            "import opsctl, opsctl.core.paths as p, "
            "opsctl.sim.records as r; l = p.layout(); "
            "print(opsctl.__file__, l.kind, l.data, l.source, r.RECORDS_ROOT, sep='\\n')",
        ],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    module, kind, data, source, records = probe.stdout.splitlines()
    assert Path(module).is_relative_to(installed.venv), module
    assert (kind, Path(data), Path(source)) == (
        paths.INSTALLED,
        installed.data,
        installed.data.parents[1],
    )
    # The simulator (an island, no opsctl.core) finds the packaged resolution records itself.
    assert Path(records) == installed.data / paths.RELEASES_DIR


def test_profile_show_and_up_dry_run_read_the_packaged_profile(installed: Installed) -> None:
    for args in (("profile", "show"), ("up", "--dry-run"),
                 ("up", "--dry-run", "--profile", GLM, "--variant", "gathercast")):
        run = installed.opsctl(*args)
        assert run.returncode == 0, (args, run.stderr)
        assert "Traceback" not in run.stderr
        stem = args[-3] if "--profile" in args else "sim"
        assert (
            f"# profile file: {installed.data / 'deploy' / f'{stem}.yaml'}"
            in run.stdout.splitlines()
        )
    assert "sglang.launch_server" in run.stdout and "--gpus" in run.stdout


def test_build_dry_run_plans_from_the_packaged_dockerfiles_and_patch_set(
    installed: Installed,
) -> None:
    sim = installed.opsctl("build", "--dry-run")
    assert sim.returncode == 0, sim.stderr
    assert str(installed.data / "docker" / "sim.Dockerfile") in sim.stdout
    # Locks are host state: an installed opsctl keeps them in its state directory.
    assert str(Path(installed.env["OPSCTL_STATE_DIR"]) / "locks" / "sim.json") in sim.stdout
    assert "app/patches/sglang/0.5.23/resolved/sim.baseline.json" in sim.stdout
    glm = installed.opsctl("build", "--dry-run", "--profile", GLM, "--variant", "gathercast")
    assert glm.returncode == 0, glm.stderr
    assert str(installed.data / "docker" / "Dockerfile") in glm.stdout
    # No lock of its own in the state directory yet: the packaged (committed) one is checked.
    assert f"base digest  {LOCKED}" in glm.stdout
    # The patch set's kernel is the installed package's own module (its hash checked in plan()).
    assert "patch set  sha256 " in glm.stdout and "opsctl-build/patches/" in glm.stdout


def test_rewriting_the_committed_records_is_refused_when_installed(installed: Installed) -> None:
    run = installed.opsctl("profile", "resolve", "--write-records")
    assert run.returncode == EXIT_USAGE, run.stdout + run.stderr
    assert "installed package" in run.stderr and "Traceback" not in run.stderr
    assert not list((installed.data / paths.RELEASES_DIR).glob("*/resolved/*.json.tmp*"))


def test_the_sdist_manifest_grafts_exactly_the_packaged_folders() -> None:
    lines = [line.split() for line in (ROOT / "MANIFEST.in").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    verbs = {verb: sorted(rest for v, *rest in lines if v == verb) for verb in ("graft", "exclude")}
    assert verbs["graft"] == sorted([rel] for rel in paths.PACKAGED)
    assert verbs["exclude"] == sorted([rel] for rel in paths.NOT_PACKAGED)


def test_what_gitignore_keeps_out_of_the_data_folders_is_not_packaged() -> None:
    ignored = [line.strip().lstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    inside = [rule for rule in ignored if any(rule.startswith(f"{rel}/") for rel in paths.PACKAGED)]
    assert sorted(inside) == sorted(paths.NOT_PACKAGED)
