"""Commands of the render room: `opsctl render k8s`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opsctl.cli.app import (
    ProfileOpt,
    VariantOpt,
    app,
    command_group,
    console,
    err_console,
    image_reference,
    non_empty,
    within,
)
from opsctl.render.settings import RENDER_DEFAULTS as _D

if TYPE_CHECKING:
    from opsctl.config.profiles import Deployment

render_app = command_group("Render a validated profile for another engine.")
app.add_typer(render_app, name="render")


def _image_ref(deployment: Deployment) -> tuple[str, bool]:
    """The registry's digest reference once `opsctl build --push` recorded one for the image
    the local tag names now, else the local tag `opsctl build` makes (not pushed).

    The push record is looked up by image id when the engine answers, so an image rebuilt
    under the same tag and not pushed again is not named by the older push's digest; without
    the engine, by tag (the last push under it), and a note says it was not checked."""
    from opsctl.core.errors import DaemonUnreachable
    from opsctl.engine.dockerpy import connect
    from opsctl.image.plan import expected_image
    from opsctl.image.registry import pushed_reference

    local = expected_image(deployment)
    try:
        image_id = connect().image_id(local)
    except DaemonUnreachable:
        pushed = pushed_reference(local)
        if pushed:
            err_console.print(f"note: Docker is unreachable: {pushed} is the last push of "
                              f"{local}, not checked against the image that tag names now",
                              markup=False, highlight=False, soft_wrap=True)
        return (pushed, True) if pushed else (local, False)
    pushed = pushed_reference(image_id) if image_id else None
    return (pushed, True) if pushed else (local, False)


@render_app.command("k8s")
def k8s(
    out: Annotated[Path, typer.Option("--out", help="Directory to write: one YAML file per "
                                      "object and kustomization.yaml (kubectl apply -k DIR).")],
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    replicas: Annotated[int, typer.Option(help="Serving units behind the router.",
                                          callback=within(1, 1000))] = _D.replicas,
    namespace: Annotated[str, typer.Option(help="Namespace of every object.")] = _D.namespace,
    model_pvc: Annotated[str | None, typer.Option(
        "--model-pvc", help="PersistentVolumeClaim holding the weights, mounted read-only "
        "(default: the profile's model.host_path as a hostPath).", callback=non_empty)
    ] = _D.model_pvc,
    cache_pvc: Annotated[str | None, typer.Option(
        "--cache-pvc", help="PersistentVolumeClaim for the JIT caches (default: an emptyDir, "
        "lost with the pod).", callback=non_empty)] = _D.cache_pvc,
    name: Annotated[str | None, typer.Option(
        help="Base of every object's name (default: <profile>-<variant>).",
        callback=non_empty)] = _D.name,
    router_image: Annotated[str | None, typer.Option(
        "--router-image", help="Image with sglang_router for the router (default: the "
        "serving image).", callback=image_reference)] = _D.router_image,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite files of the earlier render that were edited since (never "
        "a file it did not write).")] = False,
    node_selector: Annotated[list[str] | None, typer.Option(
        "--node-selector", help="KEY=VALUE: a node label the serving pods need (repeatable).")
    ] = None,
    toleration: Annotated[list[str] | None, typer.Option(
        "--toleration", help="KEY[=VALUE][:EFFECT]: a taint the serving pods tolerate, as "
        "`kubectl taint` writes it (repeatable).")] = None,
    affinity: Annotated[Path | None, typer.Option(
        "--affinity", help="YAML or JSON file of a core/v1 Affinity for the serving pods.")
    ] = None,
    priority_class: Annotated[str | None, typer.Option(
        "--priority-class", help="priorityClassName of the serving pods.")] = None,
    pdb_max_unavailable: Annotated[int | None, typer.Option(
        "--pdb-max-unavailable", help="Render a PodDisruptionBudget: serving pods a drain may "
        "take at once.", callback=within(1, 1000))] = None,
    keda_max_replicas: Annotated[int | None, typer.Option(
        "--keda-max-replicas", help="Render a KEDA ScaledObject scaling the serving units from "
        "--replicas up to this on sglang:num_queue_reqs.", callback=within(1, 1000))] = None,
    keda_prometheus: Annotated[str | None, typer.Option(
        "--keda-prometheus", help="Prometheus URL KEDA queries (with --keda-max-replicas).")
    ] = None,
    keda_queue_threshold: Annotated[int, typer.Option(
        "--keda-queue-threshold", help="Queued requests per replica at which KEDA adds one.",
        callback=within(1, 100000))] = 1,
) -> None:
    """Kubernetes manifests of a variant as a Kustomize base: its servers (a Deployment, or a
    LeaderWorkerSet when the profile spans hosts), the sglang router, PodMonitors, the
    PrometheusRule, the Grafana dashboard and, when asked, a PodDisruptionBudget and a KEDA
    ScaledObject (docs/kubernetes.md)."""
    from opsctl.config.profiles import load_profile
    from opsctl.render import app as render
    from opsctl.render import placement, view
    from opsctl.render.settings import RenderSettings

    chosen = placement.Placement(
        node_selector=placement.node_selector(node_selector or []),
        tolerations=[placement.toleration(item) for item in toleration or []],
        affinity=placement.affinity(affinity) if affinity else None,
        priority_class=placement.priority_class(priority_class),
        pdb_max_unavailable=pdb_max_unavailable,
        autoscale=placement.autoscale(keda_max_replicas, keda_prometheus, keda_queue_threshold,
                                      replicas))
    settings = RenderSettings(replicas=replicas, namespace=namespace, model_pvc=model_pvc,
                              cache_pvc=cache_pvc, name=name, router_image=router_image,
                              placement=chosen)
    result = render.render_k8s(load_profile(profile).resolve(variant), image_ref=_image_ref,
                               out=out, settings=settings, force=force)
    view.show_render(console, err_console, result)
