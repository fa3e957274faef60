"""`opsctl build --push` against a real registry: Debian's `docker-registry` (the CNCF
distribution registry) on a loopback port with its storage in a temp dir, and the real engine
(dockerd treats 127.0.0.0/8 registries as insecure-allowed, so no TLS is needed).

The digest opsctl records must be the one the registry serves for the tag, and the manifest it
serves must be the verified image's (its config digest is the local image id). A registry that is
down fails fast with one line and exit 3, leaving no tag behind.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import OpsctlRunner, wait_http_ok

from opsctl.core.errors import EXIT_BUILD
from opsctl.image import registry
from opsctl.image.registry import tag_of

pytestmark = pytest.mark.docker

REGISTRY_BIN = shutil.which("docker-registry")
MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json"])


@pytest.fixture()
def local_registry(tmp_path: Path, free_port: Callable[[], int]) -> Iterator[str]:
    """host:port of a registry serving only on loopback, stopped and its storage removed after."""
    if REGISTRY_BIN is None:
        pytest.skip("needs Debian's docker-registry (scripts/setup.sh installs it)")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(tmp_path / "storage")}},
        "http": {"addr": f"127.0.0.1:{port}"}}))
    log = tmp_path / "registry.log"
    with log.open("wb") as out:
        process = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/v2/", process, log, deadline_s=30)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_push_records_the_digest_the_registry_serves(
        sim_image: str, local_registry: str, opsctl: OpsctlRunner) -> None:
    repository = f"{local_registry}/opsctl/sim"
    target = f"{repository}:{tag_of(sim_image)}"
    try:
        result = opsctl("build", "--profile", "sim", "--push", repository)
        assert result.returncode == 0, result.stdout + result.stderr
        reference = result.stdout.split()[-1]
        served = httpx.get(f"http://{local_registry}/v2/opsctl/sim/manifests/{tag_of(sim_image)}",
                           headers={"Accept": MANIFEST_TYPES}, timeout=10)
        assert served.status_code == 200, served.text
        assert reference == f"{repository}@{served.headers['Docker-Content-Digest']}"
        assert registry.pushed_reference(sim_image) == reference
        image_id = docker("image", "inspect", "--format", "{{.Id}}", sim_image).strip()
        assert served.json()["config"]["digest"] == image_id  # the verified image, not another
        by_digest = httpx.head(f"http://{local_registry}/v2/opsctl/sim/manifests/"
                               f"{reference.rsplit('@', 1)[1]}",
                               headers={"Accept": MANIFEST_TYPES}, timeout=10)
        assert by_digest.status_code == 200  # the recorded digest resolves in the registry
    finally:
        subprocess.run(["docker", "rmi", target], capture_output=True, check=False)


def test_a_registry_that_is_down_fails_fast_with_one_line(
        sim_image: str, free_port: Callable[[], int], opsctl: OpsctlRunner) -> None:
    repository = f"127.0.0.1:{free_port()}/opsctl/sim"  # nothing listens there
    result = opsctl("build", "--profile", "sim", "--push", repository, timeout=120)
    assert result.returncode == EXIT_BUILD, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (line,) = error_lines(result.stderr)
    assert f"push of {repository}:{tag_of(sim_image)} failed" in line and "refused" in line
    assert "reachable" in result.stderr  # the hint
    assert repository not in docker("images", "--format", "{{.Repository}}")
    assert registry.pushed_reference(sim_image, repository=repository) is None
