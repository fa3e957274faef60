"""The serving units: a Deployment of one-host pods, or a LeaderWorkerSet when the profile spans
hosts (server.nnodes > 1), each pod what `opsctl up` would run on a host.

One source of truth: the container's args are `config.runspec.run_spec(...).command`, the argv
`up` runs, checked against the pinned sglang's parser; they go to `args` (not `command`), as
`docker run IMAGE ARGV` replaces only the image's CMD. The env is run_spec's (the variant's env,
its patch switch, the health-endpoint setting), with service links off so the cluster's own
Service variables (`<NAME>_PORT=...`, SGLANG_* for a Service named sglang-*) never join it.
Secrets the profile names by variable (server.api_key_env, container.env_from_host) come from
a Secret the user creates, and the argv refers to them as `$(NAME)`, which the kubelet expands.

Docker settings translate where Kubernetes has them: GPUs by count (`nvidia.com/gpu`; the device
plugin picks which), `ipc_host`/`shm_size` as a memory-backed /dev/shm (sized by shm_size when
the profile gives one; the host's /dev/shm that ipc_host shares has no size of its own either),
`--init` as shareProcessNamespace (the pause container reaps orphans as PID 1),
stop_grace_seconds as terminationGracePeriodSeconds. Kubernetes also takes CPU and memory
requests, which Docker has no need of: without them a pod is BestEffort and the first evicted
under node memory pressure, so they are always rendered (resources()). Kubernetes has no per-pod
ulimits (memlock, stack: the node's container runtime sets them) and rotates logs itself.

A multi-host unit is one LeaderWorkerSet group of nnodes pods: every pod runs the same argv plus
`--dist-init-addr $(LWS_LEADER_ADDRESS):PORT --node-rank $(LWS_WORKER_INDEX)`. LWS injects those
variables into every container: LWS_LEADER_ADDRESS is "<lws>-<group>.<subdomain>.<namespace>",
the leader pod's name in the headless Service LWS creates with the set's name, which publishes
addresses before readiness (kubernetes-sigs/lws pkg/utils/pod/pod_utils.go AddLWSVariables,
pkg/utils/controller/controller_utils.go; checked at v0.8.0 and v0.10.0).
"""

from __future__ import annotations

from typing import Any

from opsctl.argspec import spec as sglang_args
from opsctl.config.profile_checks import extra_args_problem
from opsctl.config.profiles import to_argv
from opsctl.config.runspec import run_spec
from opsctl.core import labels
from opsctl.core.errors import UsageError
from opsctl.render import meta, probes
from opsctl.render.target import Target

CONTAINER = "sglang"
LWS_API = "leaderworkerset.x-k8s.io/v1"
# LWS labels every pod with its index in the group (api/leaderworkerset/v1 WorkerIndexLabelKey);
# 0 is the leader, the only pod of a group that serves the API.
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# torch.distributed's rendezvous on the leader: any free port of the pod; this is the one
# kubernetes-sigs/lws docs/examples/sglang/lws.yaml uses.
DIST_INIT_PORT = 20000
_PER_POD_FLAGS = {
    "--dist-init-addr": "`render k8s` (the leader's address)",
    "--node-rank": "`render k8s` (each pod's LWS_WORKER_INDEX)",
}
_EVERY_INTERFACE = {"0.0.0.0", "::"}


def server_objects(target: Target) -> list[dict[str, Any]]:
    """The Deployment (one host per unit) or the LeaderWorkerSet (several)."""
    _refuse_what_cannot_run(target)
    if target.deployment.server.nnodes > 1:
        return [_leader_worker_set(target)]
    return [_deployment(target)]


def _refuse_what_cannot_run(target: Target) -> None:
    deployment = target.deployment
    server = deployment.server
    if server.host not in _EVERY_INTERFACE:
        raise UsageError(f"profile {target.profile_name!r}: server.host {server.host} is not "
                         "every interface; pods are reached on their own IP",
                         hint="set server.host: 0.0.0.0 in the profile")
    # Kubernetes expands $(NAME) in args and env values and turns `$$` into `$`: text that
    # only looks like either would change meaning on the way.
    expanded = [*to_argv(deployment), *deployment.env.values()]
    found = next((mark for mark in ("$(", "$$") for text in expanded if mark in text), None)
    if found:
        raise UsageError(f"profile {target.profile_name!r} has {found!r} in an argument or env "
                         "value, which Kubernetes would expand",
                         hint="remove it from the profile")
    if server.nnodes > 1:
        spec = sglang_args.load_spec(deployment.image.sglang_version)
        problem = extra_args_problem(server.extra_args, _PER_POD_FLAGS, spec)
        if problem:
            raise UsageError(problem[0], hint="drop it from extra_args; each pod gets its own")
    model = deployment.model
    if not (target.model_pvc or model.host_path or deployment.image.kind == "simulator"):
        raise UsageError(f"profile {target.profile_name!r} has no model.host_path and no "
                         "--model-pvc was given: the pods would have no weights",
                         hint="pass --model-pvc NAME (a claim holding the weights)")


def server_args(target: Target) -> list[str]:
    """`up`'s argv (secrets as $(NAME), from the Secret), plus each pod's rank on several hosts."""
    environ = {name: f"$({name})" for name in target.secret_vars()}
    argv = run_spec(target.deployment, target.image, environ=environ).command
    if target.deployment.server.nnodes > 1:
        argv = [*argv, "--dist-init-addr", f"$(LWS_LEADER_ADDRESS):{DIST_INIT_PORT}",
                "--node-rank", "$(LWS_WORKER_INDEX)"]
    return argv


def _env(target: Target) -> list[dict[str, Any]]:
    secret = target.secret_vars()
    spec_env = run_spec(target.deployment, target.image).env
    plain = [{"name": name, "value": value} for name, value in spec_env.items()
             if name not in secret]
    from_secret = [{"name": name, "valueFrom": {"secretKeyRef": {
        "name": target.secret_name, "key": name}}} for name in secret]
    return plain + from_secret


def _volumes(target: Target) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts): /dev/shm, the weights read-only, the JIT cache."""
    profile = target.deployment.profile
    container, model = profile.container, target.deployment.model
    shm: dict[str, Any] = {"medium": "Memory"}
    if container.shm_size:
        shm["sizeLimit"] = meta.quantity(container.shm_size)
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": shm}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if target.model_pvc:
        volumes.append({"name": "model", "persistentVolumeClaim": {
            "claimName": target.model_pvc, "readOnly": True}})
    elif model.host_path:
        volumes.append({"name": "model", "hostPath": {"path": model.host_path,
                                                      "type": "Directory"}})
    if len(volumes) > 1:
        mounts.append({"name": "model", "mountPath": model.container_path, "readOnly": True})
    if container.cache_volume:
        volumes.append({"name": "cache", **(
            {"persistentVolumeClaim": {"claimName": target.cache_pvc}} if target.cache_pvc
            else {"emptyDir": {}})})
        mounts.append({"name": "cache", "mountPath": container.cache_mount})
    return volumes, mounts


def _pod_spec(target: Target, *, leader: bool) -> dict[str, Any]:
    """A serving pod: `leader` is the one that serves the API (every one-host pod is)."""
    deployment = target.deployment
    container = deployment.profile.container
    volumes, mounts = _volumes(target)
    main: dict[str, Any] = {
        "name": CONTAINER,
        "image": target.image,
        "imagePullPolicy": "IfNotPresent",
        "args": server_args(target),
        "env": _env(target),
        "ports": [{"name": probes.PORT_NAME, "containerPort": deployment.server.port,
                   "protocol": "TCP"}],
        "startupProbe": probes.startup(deployment),
        "readinessProbe": (probes.serving_readiness(deployment) if leader
                           else probes.worker_readiness(deployment)),
        "livenessProbe": probes.liveness(deployment),
        "volumeMounts": mounts,
    }
    main["resources"] = resources(target)
    return {
        "enableServiceLinks": False,
        "shareProcessNamespace": True,
        "terminationGracePeriodSeconds": container.stop_grace_seconds,
        "containers": [main],
        "volumes": volumes,
        **target.placement.pod_fields(),
    }


def resources(target: Target) -> dict[str, Any]:
    """CPU and memory requests from the profile (ContainerSettings.pod_cpu/pod_memory), the
    memory limit only where the profile sets one, GPUs by count as a limit (the device plugin's
    extended resource: its request equals its limit)."""
    container = target.deployment.profile.container
    cpu = container.pod_cpu()
    requests = {"cpu": f"{cpu:g}" if cpu == int(cpu) else f"{round(cpu * 1000)}m",
                "memory": meta.quantity(container.pod_memory())}
    limits: dict[str, Any] = {}
    if container.memory_limit:
        limits["memory"] = meta.quantity(container.memory_limit)
    if container.gpus:
        limits["nvidia.com/gpu"] = len(container.gpus)
    return {"requests": requests, **({"limits": limits} if limits else {})}


def _replicas(target: Target) -> dict[str, int]:
    """`replicas`, unless KEDA sizes the set: then its ScaledObject holds the floor
    (minReplicaCount), and a re-apply of the manifest does not reset what KEDA scaled to."""
    return {} if target.placement.autoscale else {"replicas": target.replicas}


def _deployment(target: Target) -> dict[str, Any]:
    selector = target.selector(labels.ROLE_SERVER)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": target.metadata(target.name, labels.ROLE_SERVER),
        "spec": {
            **_replicas(target),
            "selector": {"matchLabels": selector},
            # Replace a unit before starting its successor: a surge pod would need a whole
            # spare host's GPUs and wait Pending for them.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {"metadata": target.template_metadata(labels.ROLE_SERVER),
                         "spec": _pod_spec(target, leader=True)},
        },
    }


def _leader_worker_set(target: Target) -> dict[str, Any]:
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": target.metadata(target.name, labels.ROLE_SERVER),
        "spec": {
            **_replicas(target),
            # LeaderReady would deadlock: the leader is ready only once every rank has joined.
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": target.deployment.server.nnodes,
                # One rank lost stops the whole server: restart the group together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": target.template_metadata(labels.ROLE_SERVER),
                                   "spec": _pod_spec(target, leader=True)},
                "workerTemplate": {"metadata": target.template_metadata(labels.ROLE_SERVER),
                                   "spec": _pod_spec(target, leader=False)},
            },
        },
    }


def serving_selector(target: Target) -> dict[str, str]:
    """The pods that serve the API: every one-host pod, each group's leader on several hosts."""
    selector = target.selector(labels.ROLE_SERVER)
    if target.deployment.server.nnodes > 1:
        selector[LWS_WORKER_INDEX_LABEL] = "0"
    return selector
