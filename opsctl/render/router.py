"""The sglang router (model gateway) in front of a variant's replicas: a Deployment, its Service,
and the ServiceAccount, Role and RoleBinding its Kubernetes service discovery needs.

Flags are sglang-router's, read from its wheel's `sglang_router/router_args.py`
(ROUTER_VERSION; the METADATA of sglang 0.5.23 pins no router, so this is the newest
release on PyPI when written; tests/component/test_render_k8s_real.py parses the rendered argv
with that wheel's own parser). `--policy cache_aware` routes a request to the replica whose
radix tree shares the longest prefix with it while load is balanced; `--service-discovery`
watches the namespace's pods matching `--selector` and adds each one whose Ready condition is
true and whose phase is Running at `http://<pod IP>:--service-discovery-port` (sgl-model-gateway
src/service_discovery.rs), so the serving pods' readiness probe decides who gets traffic. That
watch needs get/list/watch on pods in the namespace: the Role below, nothing cluster-wide
(`--service-discovery-namespace` keeps it to one namespace).

The router runs from the serving image by default: the upstream release images build sgl-router
into themselves (sgl-project/sglang docker/Dockerfile, "Build and install sgl-router"), which
opsctl cannot check here (no registry). `--router-image` names another image; the simulator's
image has no router at all.
"""

from __future__ import annotations

from typing import Any

from opsctl.core import labels
from opsctl.render.serving import serving_selector
from opsctl.render.target import Target

ROUTER_VERSION = "0.3.2"
ROUTER_PORT = 30000  # router_args.py RouterArgs.port default
METRICS_PORT = 29000  # router_args.py --prometheus-port default
CONTAINER = "router"


def router_name(target: Target) -> str:
    return f"{target.name}-router"


def router_args(target: Target) -> list[str]:
    selector = serving_selector(target)
    args = [
        "python3", "-m", "sglang_router.launch_router",
        "--host", "0.0.0.0", "--port", str(ROUTER_PORT),
        "--policy", "cache_aware",
        "--service-discovery",
        "--selector", *(f"{key}={value}" for key, value in selector.items()),
        "--service-discovery-port", str(target.deployment.server.port),
        "--service-discovery-namespace", target.namespace,
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(METRICS_PORT),
    ]
    key = target.deployment.server.api_key_env
    if key:  # the key the router sends to the servers, from the same Secret
        args += ["--api-key", f"$({key})"]
    return args


def router_objects(target: Target) -> list[dict[str, Any]]:
    name = router_name(target)
    role = labels.ROLE_ROUTER

    def meta() -> dict[str, Any]:
        return target.metadata(name, role)

    key = target.deployment.server.api_key_env
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": target.router_image,
        "imagePullPolicy": "IfNotPresent",
        "args": router_args(target),
        "ports": [{"name": "http", "containerPort": ROUTER_PORT, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        # /readiness is 503 until at least one server is healthy; /liveness only asks the router.
        "readinessProbe": {"httpGet": {"path": "/readiness", "port": "http"},
                           "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/liveness", "port": "http"},
                          "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 3},
    }
    if key:
        container["env"] = [{"name": key, "valueFrom": {"secretKeyRef": {
            "name": target.secret_name, "key": key}}}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(),
         "rules": [{"apiGroups": [""], "resources": ["pods"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": target.namespace}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(),
         "spec": {"replicas": 1, "selector": {"matchLabels": target.selector(role)},
                  "template": {"metadata": target.template_metadata(role),
                               "spec": {"serviceAccountName": name,
                                        "enableServiceLinks": False,
                                        "containers": [container]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta(),
         "spec": {"type": "ClusterIP", "selector": target.selector(role),
                  "ports": [{"name": "http", "port": ROUTER_PORT, "targetPort": "http",
                             "protocol": "TCP"}]}},
    ]
