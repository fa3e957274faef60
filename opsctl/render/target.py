"""What one `render k8s` renders for: the resolved variant, the image, where, how many; and the
names and metadata every object derives from it.

Object metadata carries opsctl's own label keys (core/labels.py), as the containers `up`
starts do, minus the two that mean nothing in a cluster: the Docker host's base URL, and the
image's patch-set label, which only an image on a Docker host can show. A value a label cannot
hold goes to an annotation of the same key (meta.split_metadata).

Beside them, Kubernetes' recommended `app.kubernetes.io/*` labels, which dashboards, `kubectl`
column views and policy tools read: name (what runs: sglang, its router, or opsctl's
monitoring), instance and part-of (the rendered stack, `Target.name`; the profile's
name on the monitoring objects its variants share), component (the opsctl
role), version (the sglang release, on the servers) and managed-by (opsctl). They describe;
no selector uses them, so adding or changing one never touches a Deployment's immutable
selector.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opsctl import __version__
from opsctl.config.profiles import Deployment
from opsctl.config.runspec import deployment_labels, secret_env_names
from opsctl.core import labels
from opsctl.render import meta
from opsctl.render.placement import Placement

_NOT_IN_A_CLUSTER = (labels.BASE_URL, labels.PATCH_SHA256, labels.SECRET_ENV)
APP = "app.kubernetes.io/"
# app.kubernetes.io/name per opsctl role; any other role is opsctl's own (e.g. monitoring).
_APP_NAME = {labels.ROLE_SERVER: "sglang", labels.ROLE_ROUTER: "sglang-router"}


@dataclass(frozen=True)
class Target:
    deployment: Deployment
    image: str
    router_image: str
    replicas: int
    namespace: str
    name: str  # every object's name starts with it
    model_pvc: str | None = None
    cache_pvc: str | None = None
    placement: Placement = field(default_factory=Placement)  # the serving pods' scheduling

    @property
    def profile_name(self) -> str:
        return self.deployment.profile.name

    @property
    def secret_name(self) -> str:
        """The Secret the user creates when the profile names secrets (docs/kubernetes.md)."""
        return f"{self.name}-secrets"

    def secret_vars(self) -> list[str]:
        """Variables the profile names but never values: they come from the Secret."""
        return secret_env_names(self.deployment)  # one env entry each

    def selector(self, role: str) -> dict[str, str]:
        """Labels that select this variant's pods of one role; each must be a label value."""
        wanted = {labels.MANAGED: labels.TRUE, labels.ROLE: role,
                  labels.PROFILE: self.profile_name, labels.VARIANT: self.deployment.variant}
        return {key: meta.check_label(key, value) for key, value in wanted.items()}

    def _values(self, role: str) -> dict[str, str]:
        if role == labels.ROLE_SERVER:
            every = deployment_labels(self.deployment, self.image, {})
            return {key: value for key, value in every.items() if key not in _NOT_IN_A_CLUSTER}
        return {**self.selector(role), labels.IMAGE: self.router_image, labels.VERSION: __version__}

    def app_labels(self, role: str, stack: str | None = None) -> dict[str, str]:
        """The recommended app.kubernetes.io/* labels of this role's objects; `stack` names
        what they belong to when it is not this variant's (objects the profile's variants
        share)."""
        stack = stack or self.name
        found = {APP + "name": _APP_NAME.get(role, f"opsctl-{role}"), APP + "instance": stack,
                 APP + "component": role, APP + "part-of": stack,
                 APP + "managed-by": "opsctl"}
        if role == labels.ROLE_SERVER:
            found[APP + "version"] = self.deployment.image.sglang_version
        return found

    def metadata(self, name: str, role: str) -> dict[str, Any]:
        """name, namespace, labels and (for what no label can hold) annotations."""
        fitting, rest = meta.split_metadata({**self.app_labels(role), **self._values(role),
                                             **self.selector(role)})
        out: dict[str, Any] = {"name": name, "namespace": self.namespace,
                               "labels": dict(sorted(fitting.items()))}
        if rest:
            out["annotations"] = dict(sorted(rest.items()))
        return out

    def template_metadata(self, role: str) -> dict[str, Any]:
        """A pod template's labels and annotations (no name or namespace)."""
        found = self.metadata("", role)
        return {key: value for key, value in found.items() if key in {"labels", "annotations"}}
