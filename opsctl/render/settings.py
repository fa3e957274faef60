"""The settings of `render k8s`, one object, its defaults written here only.

The CLI's option defaults and render_objects/render_k8s read them from RENDER_DEFAULTS. A
frozen dataclass, not a pydantic model like the traffic rooms' settings: it carries the
Placement the CLI checked (dataclasses holding parsed Kubernetes objects), and no report
records it (the rendered files are the record).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opsctl.core.errors import UsageError
from opsctl.core.imageref import reference_problem
from opsctl.render import meta
from opsctl.render.placement import Placement

DEFAULT_NAMESPACE = "opsctl"


@dataclass(frozen=True)
class RenderSettings:
    """What one render is for, beyond the variant and its image (`opsctl render k8s`)."""

    replicas: int = 1  # serving units behind the router
    namespace: str = DEFAULT_NAMESPACE
    model_pvc: str | None = None  # None: the profile's model.host_path as a hostPath
    cache_pvc: str | None = None  # None: an emptyDir for the JIT caches
    name: str | None = None  # base of every object's name; None: <profile>-<variant>
    router_image: str | None = None  # None: the serving image
    placement: Placement = field(default_factory=Placement)

    def __post_init__(self) -> None:
        """Every value given is checked here, by the grammar its field is written with: an
        empty one is never read as "not given" (the default), an image reference by Docker's
        grammar (so no space or newline reaches a manifest)."""
        meta.check_namespace(self.namespace)
        if self.name is not None:
            meta.check_name(self.name, "--name")
        for option, claim in (("--model-pvc", self.model_pvc), ("--cache-pvc", self.cache_pvc)):
            if claim is not None:
                meta.check_object_name(claim, option)
        problem = None if self.router_image is None else reference_problem(self.router_image)
        if problem:
            raise UsageError(f"--router-image {self.router_image!r:.80}: {problem}",
                             hint="an image the cluster can pull, e.g. REGISTRY/REPO:TAG")


RENDER_DEFAULTS = RenderSettings()
