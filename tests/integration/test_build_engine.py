"""`opsctl build` and `opsctl base-image` against the real Docker engine.

No registry is reachable, so the sglang release image is replaced by a local stand-in (Debian
bookworm from debootstrap + the real sglang wheel of the pin, --no-deps) and the production
Dockerfile is built on it unchanged with `--base-image`. Each failure in issue 4's list runs for
real: another sglang version in the base, a modified target file, a patch that no longer
applies, a failing build step, a post-build mismatch, daemon down; each must exit 3 (6 for the
daemon) with one clear line and leave no image behind.

The base images are cached by tag between runs: `opsctl base-image` skips what exists.
Each test gets its own lock directory (OPSCTL_LOCK_DIR), so the checkout's deploy/locks stays as is.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from opsctl.config import patchsets
from opsctl.core.errors import EXIT_BUILD, EXIT_DAEMON
from opsctl.core.paths import project_root
from opsctl.image import patchset

pytestmark = pytest.mark.docker

PROFILE = "glm5-nvfp4-rtx6000"
# The pin is the profile's (read without validating it: a profile that does not load fails the
# tests below through the CLI, not the collection); "another version" is the other patch set's.
_PROFILE_YAML = yaml.safe_load((project_root() / "deploy" / f"{PROFILE}.yaml").read_text())
VERSION = str(_PROFILE_YAML["image"]["sglang_version"])
# The profile needs one image per release its variants pin and --base-image names one: the
# default variant's, which runs the profile's own pin.
ONE_IMAGE = ("--profile", PROFILE, "--variant", str(_PROFILE_YAML["default_variant"]))
# The release the GPU tier runs: every GLM-5 variant of the profile runs VERSION, so the test
# below pins it on a variant of a derived profile.
OTHER_VERSION = "0.5.15"
STANDIN = f"opsctl/sglang-standin:{VERSION}"
OTHER_STANDIN = f"opsctl/sglang-standin:{OTHER_VERSION}"
PATCHED = patchsets.load_manifest(VERSION)["files"][0]["path"]
PLANTED_TOKEN = "hf_opsctlPlantedFakeToken0123456789abcdef"


def opsctl(*args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout, stdin=subprocess.DEVNULL)


def docker(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, input=stdin,
                            env={**os.environ, "DOCKER_BUILDKIT": "0"}, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def all_image_ids() -> set[str]:
    return set(docker("images", "--all", "--quiet", "--no-trunc").split())


def images_of(repository: str) -> set[str]:
    return set(docker("images", "--quiet", "--no-trunc", repository).split())


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


@pytest.fixture(scope="session")
def standins() -> None:
    """opsctl/debian-base, and stand-ins of the pin and of another version (built once, cached)."""
    for version in (VERSION, OTHER_VERSION):
        result = opsctl("base-image", "--sglang-standin", version, timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module", autouse=True)
def remove_standin_builds() -> Iterator[None]:
    """Images built on a stand-in exist only for these tests (the sim image is kept: `up` runs
    it)."""
    yield
    built = [image for base in (STANDIN, OTHER_STANDIN) for image in docker(
        "images", "--quiet", "--filter", f"label=org.opencontainers.image.base.name={base}",
        "--filter", "label=opsctl.managed=true").split()]
    for image in sorted(set(built)):
        docker("rmi", "--force", image)


@pytest.fixture()
def locks(tmp_path: Path) -> dict[str, str]:
    return {"OPSCTL_LOCK_DIR": str(tmp_path / "locks")}


@pytest.fixture()
def project_copy(tmp_path: Path) -> Iterator[Path]:
    """A copy of the project (profiles, Dockerfiles, patch sets, kernel) to break on purpose."""
    copy = tmp_path / "project"
    shutil.copytree(project_root(), copy, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", ".ruff_cache", ".pytest_cache", "locks"))
    yield copy


def assert_failed_cleanly(result: subprocess.CompletedProcess[str], before: set[str],
                          expected: str) -> None:
    assert result.returncode == EXIT_BUILD, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and expected in error_lines[0], result.stderr
    assert all_image_ids() <= before, "the failed build left images behind"


# --- success --------------------------------------------------------------------------------------


def test_sim_image_builds_then_is_up_to_date(locks: dict[str, str], standins: None) -> None:
    first = opsctl("build", "--profile", "sim", **locks)
    assert first.returncode == 0, first.stdout + first.stderr
    tag = last_line(first.stdout)
    sim_version = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())["image"]
    assert tag.startswith(f"opsctl/sim:{sim_version['sglang_version']}-")
    labels = json.loads(docker("inspect", "--format", "{{json .Config.Labels}}", tag))
    base_id = docker("inspect", "--format", "{{.Id}}", "opsctl/debian-base:bookworm").strip()
    assert labels["opsctl.managed"] == "true" and labels["opsctl.profile"] == "sim"
    assert labels["opsctl.base-digest"] == base_id
    assert tag.endswith(labels["opsctl.content-hash"][:16])
    lock = json.loads((Path(locks["OPSCTL_LOCK_DIR"]) / "sim.json").read_text())
    assert lock["bases"]["opsctl/debian-base:bookworm"] == {"digest": base_id, "kind": "image-id"}

    again = opsctl("build", "--profile", "sim", **locks)
    assert again.returncode == 0 and last_line(again.stdout) == tag
    assert "up to date" in again.stderr
    user = docker("run", "--rm", "--network", "none", tag, "python3", "-c",
                  "import os, opsctl.sim, prometheus_client; print(os.getuid())")
    assert user.strip() == "65534"


def test_production_dockerfile_on_the_standin(locks: dict[str, str], standins: None) -> None:
    result = opsctl("build", *ONE_IMAGE, "--base-image", STANDIN, "--force",
                    HF_TOKEN=PLANTED_TOKEN, HUGGING_FACE_HUB_TOKEN=PLANTED_TOKEN, **locks)
    assert result.returncode == 0, result.stdout + result.stderr
    tag = last_line(result.stdout)
    manifest = patchsets.load_manifest(VERSION)
    labels = json.loads(docker("inspect", "--format", "{{json .Config.Labels}}", tag))
    standin_id = docker("inspect", "--format", "{{.Id}}", STANDIN).strip()
    assert labels["opsctl.sglang-version"] == VERSION
    assert labels["opsctl.patch-sha256"] == patchset.patch_set_sha256(VERSION)
    assert (
        labels["opsctl.base-digest"] == labels["org.opencontainers.image.base.digest"] == standin_id
    )
    assert labels["org.opencontainers.image.base.name"] == STANDIN
    assert labels["org.opencontainers.image.version"] == VERSION

    # The patched bytes and the build metadata, read from a container of the image itself.
    script = (
        "import hashlib, importlib.util, json, pathlib;"
        "spec = importlib.util.find_spec('sglang');"
        "root = pathlib.Path(list(spec.submodule_search_locations)[0]).parent;"
        f"data = (root / '{PATCHED}').read_bytes();"
        "print(json.dumps({'sha': hashlib.sha256(data).hexdigest(),"
        " 'switch': b'OPSCTL_KV_GATHER_CAST' in data,"
        " 'meta': json.loads(pathlib.Path('/opt/opsctl/build/build.json').read_text())}))"
    )
    inside = json.loads(docker("run", "--rm", "--network", "none", tag, "python3", "-c", script))
    patched = {f["path"]: f["patched_sha256"] for f in manifest["files"]}
    assert inside["sha"] == patched[PATCHED] != hashlib.sha256(b"").hexdigest()
    assert inside["switch"] is True
    assert inside["meta"]["content_hash"] == labels["opsctl.content-hash"]
    assert inside["meta"]["base_digest"] == standin_id
    assert inside["meta"]["patch_set_sha256"] == labels["opsctl.patch-sha256"]

    # No secret in any layer, arg, env or label: the planted token was in opsctl's environment.
    history = docker("history", "--no-trunc", tag)
    inspect = docker("inspect", tag)
    assert PLANTED_TOKEN not in history and PLANTED_TOKEN not in inspect
    assert PLANTED_TOKEN not in result.stdout + result.stderr


def test_a_variant_pinning_another_release_gets_its_own_image(
    locks: dict[str, str], standins: None, tmp_path: Path
) -> None:
    # A variant that pins another patch set's release, built on that release's stand-in: the
    # same Dockerfile, that release's patch set, its own tag.
    text = (project_root() / "deploy" / f"{PROFILE}.yaml").read_text()
    text = text.replace("default_variant: gathercast", (
        "  old:\n    description: the same on the other release\n"
        f'    image: {{sglang_version: "{OTHER_VERSION}", base: "{OTHER_STANDIN}"}}\n'
        "    server: {disable_prefill_cuda_graph: false}\n"
        "default_variant: gathercast"))
    path = tmp_path / f"{PROFILE}.yaml"
    path.write_text(text)
    result = opsctl(
        "build", "--profile", str(path), "--variant", "old", "--base-image", OTHER_STANDIN, **locks
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tag = last_line(result.stdout)
    assert tag.startswith(f"opsctl/sglang-glm5:{OTHER_VERSION}-")
    labels = json.loads(docker("inspect", "--format", "{{json .Config.Labels}}", tag))
    assert labels["opsctl.sglang-version"] == OTHER_VERSION
    assert labels["opsctl.patch-sha256"] == patchset.patch_set_sha256(OTHER_VERSION)


def test_dry_run_needs_no_engine(locks: dict[str, str]) -> None:
    result = opsctl("build", *ONE_IMAGE, "--base-image", STANDIN, "--dry-run",
                    DOCKER_HOST="unix:///nonexistent/docker.sock", **locks)
    assert result.returncode == 0, result.stderr
    for field in ("base", "tag", "patch set", "build args"):
        assert field in result.stdout
    assert STANDIN in result.stdout and patchset.patch_set_sha256(VERSION) in result.stdout


# --- failures -------------------------------------------------------------------------------------


def test_daemon_down_exits_6(locks: dict[str, str]) -> None:
    result = opsctl(
        "build", "--profile", "sim", DOCKER_HOST="unix:///nonexistent/docker.sock", **locks
    )
    assert result.returncode == EXIT_DAEMON, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: Docker daemon unreachable")


def test_base_with_another_sglang_version(locks: dict[str, str], standins: None) -> None:
    before = all_image_ids()
    result = opsctl("build", *ONE_IMAGE, "--base-image", OTHER_STANDIN, **locks)
    assert_failed_cleanly(result, before,
                          f"the base has sglang {OTHER_VERSION}, the profile pins {VERSION}")


def test_base_with_a_modified_target_file(locks: dict[str, str], standins: None) -> None:
    drifted = "opsctl-test/standin-drifted:1"
    dockerfile = (f"FROM {STANDIN}\nRUN echo '# local drift' >> "
                  f"/usr/local/lib/python3.11/dist-packages/{PATCHED}\n")
    docker("build", "--quiet", "--tag", drifted, "-", stdin=dockerfile)
    try:
        before = all_image_ids()
        result = opsctl("build", *ONE_IMAGE, "--base-image", drifted, **locks)
        assert_failed_cleanly(result, before, f"{PATCHED}: modified upstream file")
    finally:
        docker("rmi", drifted)


def test_patch_that_no_longer_applies(
    locks: dict[str, str], standins: None, project_copy: Path
) -> None:
    manifest = patchsets.load_manifest(VERSION)
    diff = project_copy / "patches" / "sglang" / VERSION / manifest["files"][0]["diff"]
    lines = diff.read_text().splitlines(keepends=True)
    # Change the first context line of the first hunk: the upstream file still matches its sha256,
    # but the diff no longer matches the upstream file exactly.
    first_hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    context = next(i for i in range(first_hunk + 1, len(lines)) if lines[i].startswith(" "))
    lines[context] = " # opsctl test: this context line is not in the upstream file\n"
    diff.write_text("".join(lines))
    before = all_image_ids()
    result = opsctl("build", *ONE_IMAGE, "--base-image", STANDIN,
                    OPSCTL_PROJECT_DIR=str(project_copy), **locks)
    assert_failed_cleanly(result, before, "hunk")


def test_failing_build_step(locks: dict[str, str], standins: None, project_copy: Path) -> None:
    dockerfile = project_copy / "docker" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() +
                          '\nRUN echo "opsctl: planted step failure" >&2 && exit 7\n')
    before = all_image_ids()
    result = opsctl("build", *ONE_IMAGE, "--base-image", STANDIN,
                    OPSCTL_PROJECT_DIR=str(project_copy), **locks)
    assert_failed_cleanly(result, before, "planted step failure (build step")
    assert "failing step:" in result.stderr


def test_post_build_mismatch_removes_the_image(locks: dict[str, str], standins: None,
                                               project_copy: Path) -> None:
    # A step after the in-build checks changes a patched file: only the post-build verification
    # in a throwaway container of the finished image can notice.
    dockerfile = project_copy / "docker" / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text()
        + f"\nRUN echo '# late drift' >> /usr/local/lib/python3.11/dist-packages/{PATCHED}\n"
    )
    before_repo = images_of("opsctl/sglang-glm5")
    before = all_image_ids()
    result = opsctl("build", *ONE_IMAGE, "--base-image", STANDIN,
                    OPSCTL_PROJECT_DIR=str(project_copy), **locks)
    assert_failed_cleanly(result, before, f"verification failed: sha256 {PATCHED}")
    assert images_of("opsctl/sglang-glm5") == before_repo


def _stale_lock(lock_dir: Path, base: str) -> str:
    lock_dir.mkdir(parents=True)
    stale = "sha256:" + "0" * 64
    (lock_dir / f"{PROFILE}.json").write_text(json.dumps(
        {"profile": PROFILE, "bases": {base: {"digest": stale, "kind": "image-id"}}}))
    return stale


@pytest.fixture()
def foreign_base(standins: None, tmp_path: Path) -> Iterator[str]:
    """A local base opsctl did not make (the stand-in, relabelled): its lock must hold."""
    tag = "opsctl-test/foreign-base:1"
    (tmp_path / "Dockerfile").write_text(f'FROM {STANDIN}\nLABEL opsctl.role="user"\n')
    docker("build", "--quiet", "--tag", tag, str(tmp_path))
    yield tag
    docker("rmi", "--force", tag)


def test_moved_base_fails_until_forced(locks: dict[str, str], foreign_base: str) -> None:
    lock_dir = Path(locks["OPSCTL_LOCK_DIR"])
    stale = _stale_lock(lock_dir, foreign_base)
    refused = opsctl("build", *ONE_IMAGE, "--base-image", foreign_base, **locks)
    assert refused.returncode == EXIT_BUILD and f"locked {stale}" in refused.stderr
    forced = opsctl("build", *ONE_IMAGE, "--base-image", foreign_base, "--force", **locks)
    assert forced.returncode == 0, forced.stderr
    assert "re-locking" in forced.stderr and "re-locked" in forced.stderr
    lock = json.loads((lock_dir / f"{PROFILE}.json").read_text())
    assert lock["bases"][foreign_base]["digest"] != stale


def test_rebuilt_own_local_base_is_relocked_with_a_warning(
    locks: dict[str, str], standins: None
) -> None:
    lock_dir = Path(locks["OPSCTL_LOCK_DIR"])
    stale = _stale_lock(lock_dir, STANDIN)
    result = opsctl("build", *ONE_IMAGE, "--base-image", STANDIN, **locks)
    assert result.returncode == 0, result.stderr
    assert "re-locking" in result.stderr and "opsctl rebuilt its own local base" in result.stderr
    lock = json.loads((lock_dir / f"{PROFILE}.json").read_text())
    assert lock["bases"][STANDIN]["digest"] != stale
