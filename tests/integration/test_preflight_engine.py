"""`up`'s preflight on the real Docker engine: the simulator image, and test images derived from it
that hold a real transformers (4.57.1, the pin of the retired sglang 0.5.9; 5.19.0, sglang
0.5.23's), each with checkpoint folders the tests write (tests/checkpoints.py: GLM-5's config.json,
a tiny tokenizer, an index with stand-in shards; a missing shard; no NextN weights).

The transformers wheels and their dependencies are resolved once with `pip download` into the
wheel cache (`preflight-transformers-<version>/`), then installed --no-index in the image build:
containers have no network.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from checkpoints import glm5_config, write_checkpoint
from simprofile import remove_containers, sim_profile_data, write_profile

from opsctl.config.profiles import Deployment, load_profile
from opsctl.core import wheels
from opsctl.core.errors import EXIT_LAUNCH, LaunchError
from opsctl.core.paths import project_root
from opsctl.deploy.preflight import run_preflight
from opsctl.engine.dockerpy import connect

pytestmark = pytest.mark.docker

DOCKERFILE = project_root() / "tests" / "fixtures" / "preflight" / "transformers.Dockerfile"
TEST_REPOSITORY = "opsctl-test-preflight/transformers"
MTP = "bf16kv-mtp"


def wheel_set(version: str) -> Path:
    """transformers==version and its dependencies for the images' Python (3.11, x86_64)."""
    folder = wheels.cache_dir() / f"preflight-transformers-{version}"
    if not list(folder.glob(f"transformers-{version}-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", f"transformers=={version}",
                        "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
                        "--abi", "cp311", "--platform", "manylinux_2_28_x86_64",
                        "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                        "--disable-pip-version-check", "--quiet", "-d", str(folder)],
                       check=True, timeout=900)
    return folder


def build_transformers_image(base: str, version: str) -> str:
    """The simulator image plus transformers==version (tests/fixtures/preflight/)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as context:
        context.add(DOCKERFILE, arcname="Dockerfile")
        context.add(wheel_set(version), arcname="wheels")
    buffer.seek(0)
    tag = f"{TEST_REPOSITORY}:{version}-{uuid.uuid4().hex[:8]}"
    docker.from_env().images.build(fileobj=buffer, custom_context=True, tag=tag, rm=True,
                                   forcerm=True, buildargs={"BASE_IMAGE": base,
                                                            "TRANSFORMERS_VERSION": version})
    return tag


@pytest.fixture(scope="module")
def transformers_images(sim_image: str) -> Iterator[dict[str, str]]:
    images = {version: build_transformers_image(sim_image, version)
              for version in ("4.57.1", "5.19.0")}
    yield images
    client = docker.from_env()
    for tag in images.values():
        client.images.remove(tag, force=True)


@pytest.fixture()
def profile(tmp_path: Path, free_port) -> Iterator[tuple[Path, str, Path]]:
    """(profile path, its name, its checkpoint folder, not written yet). Its `bf16kv-mtp` runs
    EAGLE on the checkpoint's NextN layer, as the real profile's does."""
    data, name = sim_profile_data("it-preflight", free_port())
    weights = tmp_path / "weights"
    weights.mkdir()
    data["model"]["host_path"] = str(weights)
    yield write_profile(data, tmp_path), name, weights
    remove_containers(name)


def deployment(path: Path, variant: str) -> Deployment:
    return load_profile(str(path)).resolve(variant)


def preflight_leftovers(weights: Path) -> list[str]:
    """Containers that still mount `weights` (a preflight must leave none)."""
    client = docker.from_env()
    return [c.name for c in client.containers.list(all=True)
            if any(m.get("Source") == str(weights) for m in c.attrs.get("Mounts", []))]


def test_up_on_a_loadable_checkpoint_passes_the_preflight_and_serves(
        opsctl, sim_image: str, profile: tuple[Path, str, Path]) -> None:
    path, name, weights = profile
    write_checkpoint(weights)
    result = opsctl("up", "--profile", str(path), "--variant", "baseline", "--image", sim_image,
                    timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "preflight passed in " + sim_image in result.stderr
    assert "2 shards" in result.stderr
    down = opsctl("down", "--profile", str(path), timeout=120)
    assert down.returncode == 0, down.stderr


def test_a_missing_shard_exits_4_with_one_line_before_any_server_starts(
        opsctl, sim_image: str, profile: tuple[Path, str, Path]) -> None:
    path, name, weights = profile
    write_checkpoint(weights, missing_shard=True)
    result = opsctl("up", "--profile", str(path), "--variant", "baseline", "--image", sim_image,
                    timeout=300)
    assert result.returncode == EXIT_LAUNCH, result.stdout + result.stderr
    assert (f"model.safetensors.index.json names 2 shards; model-00002-of-00002.safetensors is "
            f"missing in {sim_image}") in result.stderr
    assert "Traceback" not in result.stderr
    client = docker.from_env()
    assert client.containers.list(all=True, filters={"label": f"opsctl.profile={name}"}) == []
    assert preflight_leftovers(weights) == []


def test_an_mtp_variant_needs_the_nextn_layer_in_the_checkpoint(
        sim_image: str, profile: tuple[Path, str, Path]) -> None:
    path, _, weights = profile
    write_checkpoint(weights, nextn=False)
    engine = connect()
    with pytest.raises(LaunchError) as failed:
        run_preflight(deployment(path, MTP), engine, sim_image)
    assert failed.value.message == ("the index has 0 tensors under model.layers.78.* (the NextN "
                                    f"layer after 78 layers) in {sim_image}")
    run_preflight(deployment(path, "baseline"), engine, sim_image)  # no MTP: no NextN needed
    write_checkpoint(weights, nextn=True)
    passed = run_preflight(deployment(path, MTP), engine, sim_image)
    rows = {check.check: check for check in passed.checks}
    assert rows["MTP (NextN) weights"].ok
    assert rows["MTP (NextN) weights"].detail.startswith("4 tensors under model.layers.78.*")
    assert preflight_leftovers(weights) == []


def test_transformers_4_57_1_does_not_know_glm5_and_up_exits_4(
        opsctl, transformers_images: dict[str, str], profile: tuple[Path, str, Path]) -> None:
    path, name, weights = profile
    write_checkpoint(weights)
    image = transformers_images["4.57.1"]
    with pytest.raises(LaunchError) as failed:
        run_preflight(deployment(path, "baseline"), connect(), image)
    assert failed.value.message == (f"model_type 'glm_moe_dsa' is unknown to transformers "
                                    f"4.57.1 in {image}")
    assert failed.value.details == []  # the tokenizer and the shards passed
    result = opsctl("up", "--profile", str(path), "--variant", "baseline", "--image", image,
                    timeout=300)
    assert result.returncode == EXIT_LAUNCH, result.stdout + result.stderr
    assert f"model_type 'glm_moe_dsa' is unknown to transformers 4.57.1 in {image}" in result.stderr
    assert "Traceback" not in result.stderr
    assert docker.from_env().containers.list(
        all=True, filters={"label": f"opsctl.profile={name}"}) == []
    assert preflight_leftovers(weights) == []


def test_transformers_5_19_0_loads_glm5_config_and_the_tokenizer(
        transformers_images: dict[str, str], profile: tuple[Path, str, Path]) -> None:
    path, _, weights = profile
    write_checkpoint(weights)
    image = transformers_images["5.19.0"]
    passed = run_preflight(deployment(path, MTP), connect(), image)
    rows = {check.check: check.detail for check in passed.checks}
    assert rows["transformers config"] == "transformers 5.19.0 AutoConfig: GlmMoeDsaConfig"
    assert rows["tokenizer"].startswith("transformers 5.19.0 AutoTokenizer: ")
    assert rows["tokenizer"].endswith(", 64 tokens")
    assert "MTP (NextN) weights" in rows


def test_a_config_that_is_not_glm_shaped_fails_even_on_5_19_0(
        transformers_images: dict[str, str], profile: tuple[Path, str, Path]) -> None:
    path, _, weights = profile
    config = glm5_config()
    config["model_type"] = "no_such_model"
    write_checkpoint(weights, config=config)
    image = transformers_images["5.19.0"]
    with pytest.raises(LaunchError) as failed:
        run_preflight(deployment(path, "baseline"), connect(), image)
    assert failed.value.message == (f"model_type 'no_such_model' is unknown to transformers "
                                    f"5.19.0 in {image}")
