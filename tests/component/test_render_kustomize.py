"""The folder `render k8s` writes is a Kustomize base: the real `kubectl kustomize` builds it to
exactly the rendered objects, an operator's overlay of it builds, and a re-render keeps the
overlay and the operator's own files while replacing its own."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from opsctl.config.profiles import load_profile
from opsctl.config.resolve import record_profiles
from opsctl.render import app as render
from opsctl.render import outdir, placement
from opsctl.render.settings import RenderSettings

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None,
                                reason="needs kubectl (scripts/setup.sh installs it)")
TWO_HOSTS = str(Path(__file__).parent.parent / "fixtures" / "profiles" / "glm5-2node.yaml")
PUSHED = ("registry.example/opsctl/sglang@sha256:" + "c" * 64, True)
OPTIONS = placement.Placement(
    node_selector={"nvidia.com/gpu.present": "true"},
    tolerations=[placement.toleration("nvidia.com/gpu:NoSchedule")], pdb_max_unavailable=1,
    autoscale=placement.Autoscale(max_replicas=4, prometheus="http://prometheus:9090",
                                  queue_threshold=1))


# Every base `render k8s` can write: each shipped profile's every variant, and several hosts.
EVERY_BASE = [(name, variant) for name in record_profiles()
              for variant in sorted(load_profile(name).variants)] + [(TWO_HOSTS, "gathercast")]


def _render(out: Path, profile: str = "glm5-nvfp4-rtx6000", variant: str = "gathercast",
            **options: Any) -> render.RenderResult:
    return render.render_k8s(
        load_profile(profile).resolve(variant),
        image_ref=lambda _: PUSHED,
        out=out,
        settings=RenderSettings(replicas=2, placement=OPTIONS, **options),
    )


def _kustomize(folder: Path) -> list[dict[str, Any]]:
    done = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


def _by_identity(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in objects}


@pytest.mark.parametrize(("profile", "variant"), EVERY_BASE)
def test_kustomize_builds_every_base_to_the_rendered_objects(tmp_path: Path, profile: str,
                                                             variant: str) -> None:
    result = _render(tmp_path / "base", profile, variant)
    files = [yaml.safe_load(path.read_text()) for path in result.files
             if path.name != render.KUSTOMIZATION]
    built = _by_identity(_kustomize(tmp_path / "base"))
    assert len(built) == len(files) == len(result.objects)
    assert built == _by_identity(files)


def test_an_overlay_survives_a_rerender_and_patches_the_base(tmp_path: Path) -> None:
    base = tmp_path / "base"
    _render(base)
    overlay = tmp_path / "overlays" / "prod"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../../base"], "namespace": "llm",
        "patches": [{"target": {"kind": "Deployment", "name": "glm5-nvfp4-rtx6000-gathercast"},
                     "patch": yaml.safe_dump([{"op": "add",
                                               "path": "/spec/template/spec/nodeSelector/pool",
                                               "value": "a"}])}]}))
    (base / "NOTES.md").write_text("ours\n")  # an operator's file inside the base folder
    server = _by_identity(_kustomize(overlay))["Deployment", "glm5-nvfp4-rtx6000-gathercast"]
    assert server["metadata"]["namespace"] == "llm"
    assert server["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.present": "true", "pool": "a"}
    again = _render(base, name="glm")  # different objects: the old files go
    assert again.removed and (base / "NOTES.md").read_text() == "ours\n"
    assert sorted(path.name for path in base.iterdir()) == sorted(
        [outdir.RECORD, "NOTES.md", *(path.name for path in again.files)])
    assert not list(base.glob("*-deployment-glm5-nvfp4-rtx6000-gathercast.yaml"))
    built = _by_identity(_kustomize(base))
    assert ("Deployment", "glm") in built and (
        "Deployment",
        "glm5-nvfp4-rtx6000-gathercast",
    ) not in built
