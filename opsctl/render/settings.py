"""The settings of `render k8s`, one object, its defaults written here only.

The CLI's option defaults and render_objects/render_k8s read them from RENDER_DEFAULTS. A
frozen dataclass, not a pydantic model like the traffic rooms' settings: it carries the
Placement the CLI checked (dataclasses holding parsed Kubernetes objects), and no report
records it (the rendered files are the record).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


RENDER_DEFAULTS = RenderSettings()
