"""Where the serving pods may run and how they are kept running: the options of `render k8s`
for nodeSelector, tolerations, affinity, priorityClassName, a PodDisruptionBudget and a KEDA
ScaledObject, parsed and checked before anything is rendered.

The spellings are the ones operators type elsewhere: `--node-selector KEY=VALUE` as a label
selector, `--toleration KEY[=VALUE][:EFFECT]` as `kubectl taint` writes a taint, `--affinity
FILE` a core/v1 Affinity object in YAML or JSON (too nested for a flag). They apply to the
serving pods (the Deployment's, or every pod of a LeaderWorkerSet group), not the router, which
needs no GPU node. Anything beyond these belongs in a Kustomize overlay of the rendered base.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from opsctl.core.errors import UsageError
from opsctl.core.files import read_bounded
from opsctl.core.yamlread import YamlRefused, load_yaml
from opsctl.render import meta

MAX_AFFINITY_BYTES = 1 << 20
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_AFFINITY_KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


@dataclass(frozen=True)
class Autoscale:
    """A KEDA ScaledObject on the queue the router-fronted replicas hold."""

    max_replicas: int
    prometheus: str  # the Prometheus base URL KEDA's prometheus scaler queries
    queue_threshold: int  # queued requests per replica KEDA scales out at


@dataclass(frozen=True)
class Placement:
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    affinity: dict[str, Any] | None = None
    priority_class: str | None = None
    pdb_max_unavailable: int | None = None
    autoscale: Autoscale | None = None

    def pod_fields(self) -> dict[str, Any]:
        """The PodSpec fields these options set (none when none is given)."""
        found: dict[str, Any] = {}
        if self.node_selector:
            found["nodeSelector"] = dict(sorted(self.node_selector.items()))
        if self.tolerations:
            found["tolerations"] = list(self.tolerations)
        if self.affinity:
            found["affinity"] = self.affinity
        if self.priority_class:
            found["priorityClassName"] = self.priority_class
        return found


def _check_value(value: str, option: str, given: str) -> str:
    if not meta.fits_label(value):
        raise UsageError(f"{option} {given!r}: {value!r} is not a Kubernetes label value",
                         hint="at most 63 of [A-Za-z0-9._-], starting and ending with a letter "
                              "or digit")
    return value


def node_selector(given: list[str]) -> dict[str, str]:
    """`--node-selector KEY=VALUE`, each key once."""
    found: dict[str, str] = {}
    for item in given:
        key, sign, value = item.partition("=")
        if not sign:
            raise UsageError(f"--node-selector {item!r}: not KEY=VALUE",
                             hint="e.g. --node-selector nvidia.com/gpu.product=NVIDIA-RTX-PRO-6000")
        meta.check_label_key(key, "--node-selector")
        if key in found:
            raise UsageError(f"--node-selector {key} is given twice",
                             hint="a node has one value per label: give each key once")
        found[key] = _check_value(value, "--node-selector", item)
    return found


def toleration(given: str) -> dict[str, Any]:
    """`--toleration KEY[=VALUE][:EFFECT]`: with a value the toleration is `Equal`, without one
    `Exists`; without an effect it tolerates every effect of the key."""
    body, colon, effect = given.rpartition(":") if ":" in given else (given, "", "")
    if colon and effect not in _EFFECTS:
        raise UsageError(f"--toleration {given!r}: effect {effect!r} is not one of "
                         f"{', '.join(_EFFECTS)}", hint="KEY[=VALUE][:EFFECT], as `kubectl "
                                                         "taint` writes a taint")
    key, sign, value = body.partition("=")
    found: dict[str, Any] = {"key": meta.check_label_key(key, "--toleration")}
    if sign:
        found.update(operator="Equal", value=_check_value(value, "--toleration", given))
    else:
        found["operator"] = "Exists"
    if effect:
        found["effect"] = effect
    return found


def affinity(path: Path) -> dict[str, Any]:
    """`--affinity FILE`: a core/v1 Affinity (nodeAffinity, podAffinity, podAntiAffinity) in
    YAML or JSON. Its top level is checked here; the API server checks the rest."""
    try:
        data = load_yaml(read_bounded(path, "--affinity", MAX_AFFINITY_BYTES))
    except OSError as exc:
        raise UsageError(f"--affinity {path}: {exc.strerror or exc}",
                         hint="name a readable YAML or JSON file") from None
    except YamlRefused as exc:
        raise UsageError(f"--affinity {path}: {exc}",
                         hint="a mapping with nodeAffinity, podAffinity or podAntiAffinity"
                         ) from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where else ""
        raise UsageError(f"--affinity {path}: not YAML or JSON{line}",
                         hint="a mapping with nodeAffinity, podAffinity or podAntiAffinity"
                         ) from None
    if not isinstance(data, dict) or not data:
        raise UsageError(f"--affinity {path}: not a mapping of an Affinity object",
                         hint="a mapping with nodeAffinity, podAffinity or podAntiAffinity")
    unknown = sorted(str(key) for key in data if key not in _AFFINITY_KINDS)
    if unknown:
        raise UsageError(f"--affinity {path}: {unknown[0]!r} is not a field of Affinity",
                         hint=f"the fields are {', '.join(_AFFINITY_KINDS)}")
    bad = next((key for key, value in data.items() if not isinstance(value, dict)), None)
    if bad:
        raise UsageError(f"--affinity {path}: {bad} is not a mapping",
                         hint="see `kubectl explain pod.spec.affinity`")
    return data


def priority_class(name: str | None) -> str | None:
    """A PriorityClass name: a DNS-1123 subdomain."""
    if name is not None and not meta.is_subdomain(name):
        raise UsageError(f"--priority-class {name!r} cannot name a PriorityClass",
                         hint="lower-case letters, digits, '-' and '.' (a DNS subdomain)")
    return name


def autoscale(max_replicas: int | None, prometheus: str | None, threshold: int,
              replicas: int) -> Autoscale | None:
    """The KEDA options together: --keda-max-replicas turns it on and needs --keda-prometheus."""
    if max_replicas is None:
        if prometheus is not None:
            raise UsageError("--keda-prometheus without --keda-max-replicas",
                             hint="pass --keda-max-replicas N to render a ScaledObject")
        return None
    if prometheus is None:
        raise UsageError("--keda-max-replicas needs --keda-prometheus URL",
                         hint="the Prometheus KEDA queries for sglang:num_queue_reqs, e.g. "
                              "http://prometheus-operated.monitoring:9090")
    if max_replicas < replicas:
        raise UsageError(f"--keda-max-replicas {max_replicas} is below --replicas {replicas}",
                         hint="--replicas is the floor KEDA keeps; the maximum must reach it")
    if threshold < 1:
        raise UsageError(f"--keda-queue-threshold {threshold}: at least 1",
                         hint="queued requests per replica at which KEDA adds one")
    from opsctl.core.httpcap import checked_base_url  # httpx: only when KEDA is rendered

    url = checked_base_url(prometheus, "--keda-prometheus").rstrip("/")
    if "@" in url.split("//", 1)[-1].split("/", 1)[0]:
        raise UsageError("--keda-prometheus holds credentials, which would be written into the "
                         "manifest", hint="give the URL without user:password@ and add a KEDA "
                         "TriggerAuthentication in an overlay")
    return Autoscale(max_replicas=max_replicas, prometheus=url,
                     queue_threshold=threshold)
