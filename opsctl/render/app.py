"""`opsctl render k8s`: the validated profile rendered as Kubernetes objects.

Contract (other code and tests call exactly this):

    from opsctl.render.app import render_objects

    def render_objects(deployment: Deployment, image: str,
                       settings: RenderSettings = RENDER_DEFAULTS) -> list[dict[str, Any]]

`deployment` is `load_profile(P).resolve(V)` (opsctl.config.profiles); `image` the image
reference the pods run (a pushed digest reference, or the local tag before a push); `settings`
(render/settings.py, each default written there once) what the render is for: `replicas` the
serving units behind the router; `namespace`; `model_pvc` a PersistentVolumeClaim holding the
weights (else the profile's model.host_path as a hostPath); `cache_pvc` a claim for the JIT
cache (else an emptyDir); `name` the base of every object's name (default
"<profile>-<variant>"); `router_image` the router's image (default `image`); `placement` the
serving pods' scheduling, PodDisruptionBudget and KEDA ScaledObject (render/placement.py).
Returns every object as a plain dict, in apply order; pure; raises UsageError (exit 2) on what
cannot run on Kubernetes.

`render_k8s` is the command: the image reference from the `image_ref` collaborator (the pushed
digest once `opsctl build --push` recorded one; else the local tag, flagged not deployable), the
objects as one YAML file each plus the `kustomization.yaml` that makes --out a Kustomize base,
written into --out under its record (render/outdir.py: a re-render replaces only the files it
wrote and that nobody edited since; it never deletes another file).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsctl.config.profiles import Deployment
from opsctl.core.errors import UsageError
from opsctl.core.files import check_output_path
from opsctl.observe.promconfig import dump_yaml
from opsctl.render import meta, outdir
from opsctl.render.monitoring import monitoring_objects
from opsctl.render.router import ROUTER_VERSION, router_objects
from opsctl.render.scaling import scaling_objects
from opsctl.render.serving import server_objects
from opsctl.render.settings import RENDER_DEFAULTS, RenderSettings
from opsctl.render.target import Target

# An image reference and whether a registry holds it (pushed and pinned by digest).
ImageRef = Callable[[Deployment], tuple[str, bool]]
GENERATED = (f"{outdir.MARKER}, which refuses to overwrite an edited copy: "
             "change it in a Kustomize overlay (docs/kubernetes.md).")
KUSTOMIZATION = "kustomization.yaml"
KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
# The order `kubectl apply -f DIR` takes the files in (by name): who may read pods before the
# router that reads them, the servers before the router, monitoring last.
_APPLY_ORDER = ("ServiceAccount", "Role", "RoleBinding", "LeaderWorkerSet", "Deployment",
                "PodDisruptionBudget", "ScaledObject", "Service", "PodMonitor", "PrometheusRule",
                "ConfigMap")


def render_objects(deployment: Deployment, image: str,
                   settings: RenderSettings = RENDER_DEFAULTS) -> list[dict[str, Any]]:
    return _objects(_target(deployment, image, settings))


def _target(deployment: Deployment, image: str, settings: RenderSettings) -> Target:
    replicas, name = settings.replicas, settings.name
    if replicas < 1:
        raise UsageError(f"--replicas {replicas}: at least one serving unit is needed",
                         hint="pass --replicas 1 or more")
    base = name or f"{deployment.profile.name}-{deployment.variant}"
    return Target(
        deployment=deployment, image=image, router_image=settings.router_image or image,
        replicas=replicas, namespace=meta.check_namespace(settings.namespace),
        name=meta.check_name(base, "--name" if name else "the profile-variant name"),
        model_pvc=settings.model_pvc and meta.check_object_name(settings.model_pvc),
        cache_pvc=settings.cache_pvc and meta.check_object_name(settings.cache_pvc),
        placement=settings.placement)


def _objects(target: Target) -> list[dict[str, Any]]:
    made = [*server_objects(target), *scaling_objects(target), *router_objects(target),
            *monitoring_objects(target)]
    return sorted(made, key=lambda obj: _APPLY_ORDER.index(obj["kind"]))


def manifest_files(objects: list[dict[str, Any]], header: str = GENERATED) -> dict[str, str]:
    """One YAML file per object, named `NN-kind-name.yaml` in apply order."""
    return {f"{index:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml":
            dump_yaml(obj, header) for index, obj in enumerate(objects, start=1)}


@dataclass(frozen=True)
class RenderResult:
    out: Path
    files: list[Path]
    image: str
    pushed: bool
    objects: list[tuple[str, str]]  # (kind, name)
    notes: list[str]
    removed: list[str] = field(default_factory=list)  # files of the earlier render it dropped


def kustomization(files: list[str], header: str = GENERATED) -> str:
    """The Kustomize base: the objects' files as its resources, in apply order. Overlays name
    this folder (`resources: [../base]`) and patch it; `kubectl apply -k DIR` applies it."""
    return dump_yaml({"apiVersion": KUSTOMIZE_API, "kind": "Kustomization",
                      "resources": sorted(files)}, header)


def render_k8s(deployment: Deployment, *, image_ref: ImageRef, out: Path,
               settings: RenderSettings = RENDER_DEFAULTS, force: bool = False) -> RenderResult:
    """Render and write; --out is refused before any work when it cannot be written: a folder
    holding someone else's files, a file of an earlier render edited since (unless `force`)."""
    out = Path(os.path.abspath(out))
    check_output_path(out, "--out", directory=True)
    outdir.check_folder(out)  # someone else's folder, or a bad record: refused before any work
    image, pushed = image_ref(deployment)
    target = _target(deployment, image, settings)
    objects = _objects(target)
    header = GENERATED if pushed else (
        f"{GENERATED}\nNOT DEPLOYABLE: {image} is a local tag no cluster can pull; run "
        "`opsctl build --push REGISTRY/REPO`, then render again.")
    files = manifest_files(objects, header)
    files[KUSTOMIZATION] = kustomization(list(files), header)
    plan = outdir.plan_write(out, files, force)
    written = outdir.write(out, plan)
    return RenderResult(out=out, files=written, image=image, pushed=pushed,
                        objects=[(obj["kind"], obj["metadata"]["name"]) for obj in objects],
                        notes=_notes(target, settings.router_image), removed=plan.delete)


def _notes(target: Target, router_image: str | None) -> list[str]:
    """What the reader must do or know before `kubectl apply`."""
    deployment = target.deployment
    model = deployment.model
    notes = [f"router flags are sglang-router {ROUTER_VERSION}'s; the image must carry a "
             "compatible sglang_router"]
    if deployment.image.kind == "simulator" and not router_image:
        notes.append("the simulator image has no sglang_router: the router will not start; "
                     "pass --router-image")
    if deployment.server.nnodes > 1:
        notes.append("needs the LeaderWorkerSet controller (leaderworkerset.x-k8s.io/v1)")
    if not target.model_pvc and model.host_path:
        notes.append(f"hostPath weights: every GPU node needs {model.host_path}; "
                     "or pass --model-pvc")
    if target.placement.autoscale:
        notes.append("needs KEDA's controller (keda.sh/v1alpha1) and a Prometheus at "
                     f"{target.placement.autoscale.prometheus} that scrapes the PodMonitor")
    if target.placement.priority_class:
        notes.append(f"PriorityClass {target.placement.priority_class} must exist in the cluster")
    if target.secret_vars():
        notes.append(f"create Secret {target.secret_name} first, with the keys "
                     f"{', '.join(target.secret_vars())}")
    return notes
