"""Commands of the render room: `opsctl render k8s`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opsctl.cli.app import ProfileOpt, VariantOpt, app, command_group, console, err_console, within

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
    out: Annotated[Path, typer.Option("--out", help="Directory to write, one YAML file per "
                                      "object (kubectl apply -f DIR).")],
    profile: ProfileOpt = None,
    variant: VariantOpt = None,
    replicas: Annotated[int, typer.Option(help="Serving units behind the router.",
                                          callback=within(1, 1000))] = 1,
    namespace: Annotated[str, typer.Option(help="Namespace of every object.")] = "opsctl",
    model_pvc: Annotated[str | None, typer.Option(
        "--model-pvc", help="PersistentVolumeClaim holding the weights, mounted read-only "
        "(default: the profile's model.host_path as a hostPath).")] = None,
    cache_pvc: Annotated[str | None, typer.Option(
        "--cache-pvc", help="PersistentVolumeClaim for the JIT caches (default: an emptyDir, "
        "lost with the pod).")] = None,
    name: Annotated[str | None, typer.Option(
        help="Base of every object's name (default: <profile>-<variant>).")] = None,
    router_image: Annotated[str | None, typer.Option(
        "--router-image", help="Image with sglang_router for the router (default: the "
        "serving image).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace --out when it holds an earlier render (nothing else).")] = False,
) -> None:
    """Kubernetes manifests of a variant: its servers (a Deployment, or a LeaderWorkerSet when
    the profile spans hosts), the sglang router, PodMonitors, the PrometheusRule and the
    Grafana dashboard (docs/kubernetes.md)."""
    from opsctl.config.profiles import load_profile
    from opsctl.render import app as render
    from opsctl.render import view

    result = render.render_k8s(
        load_profile(profile).resolve(variant), image_ref=_image_ref, out=out,
        replicas=replicas, namespace=namespace, model_pvc=model_pvc, cache_pvc=cache_pvc,
        name=name, router_image=router_image, force=force)
    view.show_render(console, err_console, result)
