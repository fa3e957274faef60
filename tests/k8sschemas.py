"""Offline schema validation of rendered Kubernetes objects (versions and sources:
tests/k8s/SCHEMAS.md).

- Built-in kinds (Deployment, Service, ConfigMap, RBAC, ...): the Kubernetes OpenAPI schema of
  `K8S_VERSION` as the PyPI package kubernetes-validate ships it, strict (unknown fields rejected).
- PodMonitor, ServiceMonitor, PrometheusRule and KEDA's ScaledObject: tests/k8s/validate.mjs
  (node), from the npm packages @kubernetes-models/prometheus-operator and @kubernetes-models/keda.
- LeaderWorkerSet: no registry we reach ships its CRD, so its pod templates and volume claims
  are checked against the core schemas and its own fields against `LWS_STRUCTURE`, written by
  hand from the API types; and against the upstream CRD too when `LWS_CRD` exists.

`schema_errors(objects)` is what tests call: one entry per object, an empty list when it is
valid (`schema_errors_of_sets` for many renders at once: node starts once).
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError
from referencing import Registry, Resource

K8S_VERSION = "1.33"  # the Kubernetes version every built-in kind is validated against
NODE_DIR = Path(__file__).parent / "k8s"
MONITORING_API = "monitoring.coreos.com/v1"
MONITORING_KINDS = ("PodMonitor", "ServiceMonitor", "PrometheusRule")
KEDA_API = "keda.sh/v1alpha1"
NODE_APIS = (MONITORING_API, KEDA_API)  # the APIs tests/k8s/validate.mjs validates
LWS_API = "leaderworkerset.x-k8s.io/v1"
# The upstream CRD, where someone provides it (nothing fetches it: see SCHEMAS.md).
LWS_CRD = Path(__file__).resolve().parents[2] / "shared" / "schemas" / \
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
_DEFS = "https://kubernetes.io/api/_definitions.json#/$defs/"


def _int(minimum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum}


def _closed(properties: dict[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _DEFS + name}


# LeaderWorkerSet v1 (leaderworkerset.x-k8s.io), from the Go API types of
# sigs.k8s.io/lws/api/leaderworkerset/v1 (LeaderWorkerSetSpec, LeaderWorkerTemplate,
# RolloutStrategy, RollingUpdateConfiguration, SubGroupPolicy, NetworkConfig): field names, JSON
# types, required fields, enums and defaults-implied minimums. Pod templates, volume claims and
# metadata resolve to the core schemas of K8S_VERSION. `status` is the controller's, never rendered.
LWS_STRUCTURE: dict[str, Any] = _closed({
    "apiVersion": {"const": LWS_API},
    "kind": {"const": "LeaderWorkerSet"},
    "metadata": _ref("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
    "spec": _closed({
        "replicas": _int(0),
        "leaderWorkerTemplate": _closed({
            "leaderTemplate": _ref("io.k8s.api.core.v1.PodTemplateSpec"),
            "workerTemplate": _ref("io.k8s.api.core.v1.PodTemplateSpec"),
            "size": _int(1),
            "restartPolicy": {"enum": ["Default", "RecreateGroupOnPodRestart", "None"]},
            "subGroupPolicy": _closed({
                "subGroupPolicyType": {"enum": ["LeaderWorker", "LeaderExcluded"]},
                "subGroupSize": _int(1),
            }),
            "volumeClaimTemplates": {"type": "array",
                                     "items": _ref("io.k8s.api.core.v1.PersistentVolumeClaim")},
            "persistentVolumeClaimRetentionPolicy": _ref(
                "io.k8s.api.apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicy"),
        }, required=["workerTemplate"]),
        "rolloutStrategy": _closed({
            "type": {"enum": ["RollingUpdate"]},
            "rollingUpdateConfiguration": _closed({
                "partition": _int(0),
                "maxUnavailable": _ref("io.k8s.apimachinery.pkg.util.intstr.IntOrString"),
                "maxSurge": _ref("io.k8s.apimachinery.pkg.util.intstr.IntOrString"),
            }),
        }, required=["type"]),
        "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
        "networkConfig": _closed({"subdomainPolicy": {"enum": ["Shared", "UniquePerReplica"]}},
                                 required=["subdomainPolicy"]),
    }, required=["leaderWorkerTemplate"]),
}, required=["apiVersion", "kind", "metadata", "spec"])


def _name(obj: Any) -> str:
    if not isinstance(obj, dict):
        return repr(obj)[:40]
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"


def _where(error: jsonschema.ValidationError) -> str:
    return "/" + "/".join(str(part) for part in error.absolute_path)


def core_errors(obj: dict[str, Any]) -> list[str]:
    """A built-in kind against the strict schema of K8S_VERSION (the first error, as the
    package reports it)."""
    try:
        used = kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except ValidationError as exc:
        return [f"{_where(exc)} {exc.message}"]
    except SchemaNotFoundError as exc:
        return [exc.message]
    if used != K8S_VERSION:  # the package fell back to another version's schema
        return [f"validated against Kubernetes {used}, not {K8S_VERSION}"]
    return []


# What the API server checks beyond the OpenAPI schema (apimachinery's validation of names,
# label and annotation keys, label values; IANA service names for ports): a manifest that breaks
# them passes every schema and is still refused by `kubectl apply`.
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(?:\.{_DNS_LABEL})*$")
_DNS_LABEL_NAME = re.compile(rf"^{_DNS_LABEL}$")
_DNS_1035 = re.compile(r"^[a-z](?:[-a-z0-9]*[a-z0-9])?$")  # Service names
_QUALIFIED = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9](?:-?[a-z0-9])*$")


def _bad_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return (bool(prefix) and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or \
        len(name) > 63 or not _QUALIFIED.match(name)


def _meta_errors(meta: dict[str, Any], where: str) -> list[str]:
    errors = []
    for key, value in (meta.get("labels") or {}).items():
        if _bad_key(key):
            errors.append(f"{where}/labels: key {key!r} is not a qualified name")
        if len(str(value)) > 63 or (value and not _QUALIFIED.match(str(value))):
            errors.append(f"{where}/labels/{key}: value {value!r} is not a label value")
    errors += [f"{where}/annotations: key {key!r} is not a qualified name"
               for key in meta.get("annotations") or {} if _bad_key(key)]
    return errors


def api_rule_errors(node: Any, where: str = "") -> list[str]:
    """Names, labels, annotation keys, container, port and volume names anywhere in `node`."""
    errors: list[str] = []
    if isinstance(node, list):
        for index, item in enumerate(node):
            errors += api_rule_errors(item, f"{where}/{index}")
        return errors
    if not isinstance(node, dict):
        return errors
    if isinstance(node.get("metadata"), dict):
        errors += _meta_errors(node["metadata"], f"{where}/metadata")
        name = str(node["metadata"].get("name", ""))
        if name and (len(name) > 253 or not _DNS_SUBDOMAIN.match(name)):
            errors.append(f"{where}/metadata/name: {name!r} is not a DNS-1123 subdomain")
        if node.get("kind") == "Service" and (len(name) > 63 or not _DNS_1035.match(name)):
            errors.append(f"{where}/metadata/name: {name!r} is not a DNS-1035 label (Service)")
    for field in ("containers", "initContainers", "volumes"):
        for index, item in enumerate(node.get(field) or []):
            item = item if isinstance(item, dict) else {}
            name = str(item.get("name", ""))
            if len(name) > 63 or not _DNS_LABEL_NAME.match(name):
                errors.append(f"{where}/{field}/{index}/name: {name!r} is not a DNS-1123 label")
            ports = item.get("ports") if field != "volumes" else None
            for port_index, port in enumerate(ports or []):
                port_name = str(port.get("name", "")) if isinstance(port, dict) else ""
                if port_name and (len(port_name) > 15 or not _PORT_NAME.match(port_name)):
                    errors.append(f"{where}/{field}/{index}/ports/{port_index}/name: "
                                  f"{port_name!r} is not an IANA service name (15 characters)")
    for key, value in node.items():
        if key != "metadata":
            errors += api_rule_errors(value, f"{where}/{key}")
    return errors


@functools.cache
def _core_registry() -> Registry:
    schema_dir = (Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" /
                  f"v{K8S_VERSION}.0-local-strict")
    definitions = json.loads((schema_dir / "_definitions.json").read_text())
    return Resource.from_contents(definitions) @ Registry()


def lws_errors(obj: dict[str, Any]) -> list[str]:
    """A LeaderWorkerSet against LWS_STRUCTURE (pod templates against the core schema), and
    against the upstream CRD's openAPIV3Schema when LWS_CRD exists."""
    validator = jsonschema.Draft202012Validator(LWS_STRUCTURE, registry=_core_registry())
    errors = [f"{_where(e)} {e.message}" for e in validator.iter_errors(obj)]
    if LWS_CRD.exists():
        errors += [f"crd: {message}" for message in crd_errors(obj, LWS_CRD)]
    return errors


def crd_errors(obj: dict[str, Any], crd_path: Path) -> list[str]:
    """The object against the served version's openAPIV3Schema of a CRD file, with unknown
    fields rejected (kubectl's strict field validation) and Kubernetes' int-or-string honoured."""
    crd = yaml.safe_load(crd_path.read_text())
    version = obj["apiVersion"].rsplit("/", 1)[-1]
    served = [v for v in crd["spec"]["versions"] if v["name"] == version]
    if not served:
        return [f"{crd_path.name} serves no version {version}"]
    schema = _strict(served[0]["schema"]["openAPIV3Schema"])
    validator = jsonschema.Draft7Validator(schema)
    return [f"{_where(e)} {e.message}" for e in validator.iter_errors(obj)]


def _strict(node: Any) -> Any:
    """An OpenAPI v3 structural schema as JSON Schema: objects with properties accept no other
    field unless they preserve unknown fields; x-kubernetes-int-or-string allows both types."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def monitoring_errors(objects: list[dict[str, Any]]) -> list[list[str]]:
    """Prometheus operator and KEDA objects through tests/k8s/validate.mjs (one node run for
    all)."""
    if not objects:
        return []
    if shutil.which("node") is None or not (NODE_DIR / "node_modules").is_dir():
        pytest.skip("needs node and `npm ci` in tests/k8s (scripts/setup.sh does both)")
    result = subprocess.run(["node", str(NODE_DIR / "validate.mjs")], input=json.dumps(objects),
                            capture_output=True, text=True, timeout=120, check=False)
    if result.returncode not in (0, 1):
        raise RuntimeError(f"validate.mjs exited {result.returncode}: {result.stderr[-2000:]}")
    return [entry["errors"] for entry in json.loads(result.stdout)]


def schema_errors(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Every object's errors, keyed "Kind/name" (index-suffixed when a key repeats); a kind no
    schema covers is an error (kubernetes-validate finds no schema), so nothing passes
    unvalidated."""
    return schema_errors_of_sets([objects])[0]


def schema_errors_of_sets(sets: list[list[dict[str, Any]]]) -> list[dict[str, list[str]]]:
    """`schema_errors` of several sets of objects (one render each), with one node run for all
    their monitoring objects."""
    flat = [(number, index, obj) for number, objects in enumerate(sets)
            for index, obj in enumerate(objects)]
    monitoring = [(number, index) for number, index, obj in flat if _api(obj) in NODE_APIS]
    found = dict(zip(monitoring, monitoring_errors(
        [sets[number][index] for number, index in monitoring]), strict=True))
    for number, index, obj in flat:
        if (number, index) in found:
            continue
        if not isinstance(obj, dict):
            found[number, index] = ["not an object"]
        elif _api(obj) == LWS_API:
            found[number, index] = lws_errors(obj)
        else:
            found[number, index] = core_errors(obj)
    for number, index, obj in flat:
        found[number, index] = found[number, index] + [f"api: {line}" for line in
                                                       api_rule_errors(obj)]
    results = []
    for number, objects in enumerate(sets):
        errors: dict[str, list[str]] = {}
        for index, obj in enumerate(objects):
            key = _name(obj)
            errors[key if key not in errors else f"{key}#{index}"] = found[number, index]
        results.append(errors)
    return results


def _api(obj: Any) -> str:
    return str(obj.get("apiVersion", "")) if isinstance(obj, dict) else ""
