"""`opsctl build` through the release overlay (image.install_release) on the real engine.

The GLM profile builds on a release image whose tag public sources show and installs the pinned
release into it. No registry is reachable here, so both are stood in for: the base is a local
image holding ANOTHER sglang (Debian from `opsctl base-image` plus the real sglang 0.5.15 wheel,
--no-deps, and a stand-in of one pin at its pinned version), and the wheel cache holds the real
sglang 0.5.23 wheel (the one patches/sglang/0.5.23/stack.json records) plus STAND-IN wheels, made
here, for every other `==` pin of its METADATA: empty distributions named and versioned exactly
as the real wheel pins them (read from it), summary "opsctl test stand-in". The build must
install 0.5.23 and every pin the base does not hold, apply the patch set and prove every pinned
version inside; a wheel the pin cannot install fails it with exit 3, leaving nothing behind.

Every image here has a unique tag and is removed at the end.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from opsctl.argspec.stack import stack_path
from opsctl.core import wheels
from opsctl.core.errors import EXIT_BUILD
from opsctl.core.paths import project_root
from opsctl.image import baseimage, wheelhouse

pytestmark = pytest.mark.docker

PROFILE = "glm5-nvfp4-rtx6000"
VERSION = "0.5.23"
OTHER_VERSION = "0.5.15"  # the base's release: a real wheel in the host's cache
HELD = "transformers"  # a pin the base already holds at the pinned version (a stand-in)
RUN_ID = uuid.uuid4().hex[:12]
REPOSITORY = f"opsctl-test/overlay-{RUN_ID}"
BASE_TAG = f"{REPOSITORY}:base"


def opsctl(
    *args: str, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout, stdin=subprocess.DEVNULL)


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False,
                          env={**os.environ, "DOCKER_BUILDKIT": "0"}, timeout=600)


def standin_wheel(
    folder: Path, name: str, version: str, metadata_version: str | None = None
) -> Path:
    """An empty wheel of `name`==`version` (its METADATA may claim `metadata_version`)."""
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: "
                            f"{metadata_version or version}\nSummary: opsctl test stand-in, not "
                            f"the real {name}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: opsctl-test\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture(scope="module")
def release() -> dict[str, object]:
    """The release as the build reads it: the real 0.5.23 wheel and its METADATA's pins."""
    return wheelhouse.release(VERSION)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, release: dict[str, object]) -> Iterator[str]:
    """opsctl/debian-base + the real sglang 0.5.15 (--no-deps) + a stand-in of HELD at its pin."""
    made = opsctl("base-image", env={}, timeout=900)  # opsctl's own base; skipped when present
    assert made.returncode == 0, made.stdout + made.stderr
    context = tmp_path_factory.mktemp("overlay-base")
    old = wheels.fetch("sglang", OTHER_VERSION)
    shutil.copyfile(old, context / old.name)
    pins = release["pins"]
    assert isinstance(pins, dict)
    held = standin_wheel(context, HELD, pins[HELD])
    (context / "Dockerfile").write_text(
        f"FROM {baseimage.DEBIAN_BASE}\nCOPY *.whl /tmp/wheels/\n"
        "RUN python3 -m pip install --no-index --no-deps --break-system-packages "
        f"/tmp/wheels/{old.name} /tmp/wheels/{held.name} && rm -rf /tmp/wheels\n")
    built = docker("build", "--label", f"opsctl.test-run={RUN_ID}", "-t", BASE_TAG, str(context))
    assert built.returncode == 0, built.stdout + built.stderr
    yield BASE_TAG
    for image in docker("images", "--quiet", "--filter", f"label=opsctl.test-run={RUN_ID}"
                        ).stdout.split():
        docker("rmi", "--force", image)
    for image in docker("images", "--quiet", REPOSITORY).stdout.split():
        docker("rmi", "--force", image)


def setup(tmp_path: Path, base: str, release: dict[str, object], broken: str | None = None
          ) -> tuple[Path, dict[str, str]]:
    """A copy of the GLM profile on `base`, and a wheel cache: the real release wheel, stand-ins
    for the other pins (`broken`'s claims another version in its METADATA)."""
    cache = tmp_path / "wheels"
    cache.mkdir()
    real = wheels.cache_dir() / str(release["wheel"])
    (cache / real.name).symlink_to(real)
    pins = release["pins"]
    assert isinstance(pins, dict)
    for name, version in pins.items():
        if name != "sglang":
            standin_wheel(cache, name, version, "0.0.0.dev0" if name == broken else None)
    text = (project_root() / "deploy" / f"{PROFILE}.yaml").read_text()
    assert "  base: lmsysorg/sglang:v0.5.21-cu130\n" in text
    profile = tmp_path / f"{PROFILE}.yaml"
    profile.write_text(text.replace("  base: lmsysorg/sglang:v0.5.21-cu130\n", f"  base: {base}\n"))
    env = {wheels.WHEEL_CACHE_ENV: str(cache), "OPSCTL_LOCK_DIR": str(tmp_path / "locks"),
           "OPSCTL_STATE_DIR": str(tmp_path / "state")}
    return profile, env


def test_build_installs_the_release_into_a_base_of_another_and_proves_it(
        tmp_path: Path, base: str, release: dict[str, object]) -> None:
    profile, env = setup(tmp_path, base, release)
    tag = f"{REPOSITORY}:ok"
    result = opsctl("build", "--profile", str(profile), "--tag", tag, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    pins = release["pins"]
    assert isinstance(pins, dict)
    for dist in wheelhouse.HEADLINE:  # proven in the throwaway container too
        assert f"ok   {dist} version: installed {pins[dist]}, pinned {pins[dist]}" in output

    probe = ("import importlib.metadata as m, json; "
             "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
    inside = docker("run", "--rm", "--network", "none", tag, "python3", "-c", probe)
    assert inside.returncode == 0, inside.stderr
    installed = {wheelhouse.normal(k): v for k, v in json.loads(inside.stdout).items()}
    assert {name: installed.get(name) for name in pins} == pins
    # What the overlay did: 0.5.15 replaced, every absent pin installed, the held one left alone.
    done = docker("run", "--rm", "--network", "none", tag, "cat", "/opt/opsctl/build/overlay.json")
    report = json.loads(done.stdout)
    assert report["held"] == {HELD: pins[HELD]}
    assert report["installed"]["sglang"] == {"base": OTHER_VERSION, "pinned": VERSION}
    assert report["installed"]["torch"] == {"base": None, "pinned": pins["torch"]}
    assert set(report["installed"]) == set(pins) - {HELD}
    meta = docker("run", "--rm", "--network", "none", tag, "cat", "/opt/opsctl/build/build.json")
    recorded = json.loads(meta.stdout)["wheels"]
    stack = json.loads(stack_path(VERSION).read_text())
    assert recorded[stack["provenance"]["wheel"]] == stack["provenance"]["wheel_sha256"]
    assert len(recorded) == len(pins)


def test_a_wheel_that_does_not_hold_its_pin_fails_the_build_and_leaves_nothing(
        tmp_path: Path, base: str, release: dict[str, object]) -> None:
    profile, env = setup(tmp_path, base, release, broken="torch")
    tag = f"{REPOSITORY}:broken"
    before = set(docker("images", "--all", "--quiet", "--no-trunc").stdout.split())
    result = opsctl("build", "--profile", str(profile), "--tag", tag, env=env)
    assert result.returncode == EXIT_BUILD, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "pip install of the release's wheels failed" in errors[0], errors
    assert set(docker("images", "--all", "--quiet", "--no-trunc").stdout.split()) <= before
