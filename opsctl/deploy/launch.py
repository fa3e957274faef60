"""Launching a deployment: RunSpec from a Deployment (pure), `up` with a readiness state machine,
and `down`/`status`/`logs`, which find containers by opsctl's labels only.

Readiness (DESIGN.md): connection refused and 503 mean "still loading" (an 8-GPU load takes many
minutes); a container that exits before ready is a failure whatever its exit code; ready means
`/health_generate` answers 200 and `/v1/models` lists the served model name.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from opsctl import __version__
from opsctl.core.errors import LaunchError
from opsctl.deploy.profiles import Deployment, check_argv
from opsctl.engine.dockerpy import MANAGED_LABEL, ContainerInfo, Engine, Mount, PortBinding, RunSpec

ROLE_LABEL = "opsctl.role"
SERVER_ROLE = "server"
# Health generation in sglang waits ~1 s before answering; give it room (its own chart uses 10 s).
PROBE_TIMEOUT_SECONDS = 10.0

# Lines worth showing when a server dies while loading: what operators grep for first.
_RECOGNISABLE = re.compile(
    r"out of memory|OutOfMemoryError|CUDA error|NCCL|unrecognized arguments|error: argument|"
    r"ambiguous option|Traceback|Error:|RuntimeError|AssertionError|Killed",
    re.IGNORECASE,
)


class Phase(enum.StrEnum):
    STARTING = "starting"  # container created, no answer yet
    LOADING = "loading"  # port closed: weights loading
    WARMING = "warming"  # 503: sglang's ServerStatus.Starting, warm-up, CUDA graph capture
    READY = "ready"


@dataclass(frozen=True)
class Probe:
    phase: Phase
    detail: str


@dataclass(frozen=True)
class Running:
    container: ContainerInfo
    base_url: str
    already_up: bool
    elapsed_seconds: float


# --- pure: Deployment -> RunSpec ---------------------------------------------------------------


def container_name(deployment: Deployment) -> str:
    return f"opsctl-{deployment.profile.name}"


def deployment_labels(deployment: Deployment, image: str, image_labels: dict[str, str]) -> dict[str, str]:
    return {
        MANAGED_LABEL: "true",
        ROLE_LABEL: SERVER_ROLE,
        "opsctl.profile": deployment.profile.name,
        "opsctl.variant": deployment.variant,
        "opsctl.image": image,
        "opsctl.sglang-version": deployment.profile.image.sglang_version,
        "opsctl.patch-sha256": image_labels.get("opsctl.patch-sha256", "none"),
        "opsctl.config-hash": deployment.config_hash(),
        "opsctl.served-model": deployment.profile.model.served_name,
        "opsctl.base-url": base_url(deployment),
        "opsctl.stop-grace-seconds": str(deployment.profile.container.stop_grace_seconds),
        "opsctl.version": __version__,
    }


def run_spec(deployment: Deployment, image: str, image_labels: dict[str, str] | None = None) -> RunSpec:
    """Everything about the container, derived from the profile; golden-tested per variant."""
    profile = deployment.profile
    container = profile.container
    mounts = []
    if profile.model.host_path:
        mounts.append(Mount(source=profile.model.host_path, target=profile.model.container_path,
                            read_only=True))
    if container.cache_volume:
        mounts.append(Mount(source=container.cache_volume, target=container.cache_mount, kind="volume"))
    ulimits: dict[str, tuple[int, int]] = {}
    if container.memlock_unlimited:
        ulimits["memlock"] = (-1, -1)
    if container.stack_bytes:
        ulimits["stack"] = (container.stack_bytes, container.stack_bytes)
    return RunSpec(
        image=image,
        command=check_argv(deployment),
        name=container_name(deployment),
        labels=deployment_labels(deployment, image, image_labels or {}),
        env=deployment.env,
        ports=[PortBinding(container_port=deployment.server.port, host_port=container.host_port,
                           host_address=container.publish_address)],
        mounts=mounts,
        gpus=list(container.gpus),
        ipc_host=container.ipc_host,
        shm_size=None if container.ipc_host else container.shm_size,
        ulimits=ulimits,
        init=True,
        stop_grace_seconds=container.stop_grace_seconds,
    )


def base_url(deployment: Deployment) -> str:
    address = deployment.profile.container.publish_address
    # A server published on every interface is still reached from here over loopback.
    host = "127.0.0.1" if address in {"0.0.0.0", "::", ""} else address
    return f"http://{host}:{deployment.profile.container.host_port}"


# --- readiness ---------------------------------------------------------------------------------


def probe(client: httpx.Client, url: str, served_name: str) -> Probe:
    """One look at the server: which phase is it in?"""
    try:
        health = client.get(f"{url}/health_generate", timeout=PROBE_TIMEOUT_SECONDS)
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
        return Probe(Phase.LOADING, "port closed")
    except httpx.TimeoutException:
        return Probe(Phase.WARMING, "health check timed out")
    if health.status_code != 200:
        return Probe(Phase.WARMING, f"/health_generate answered {health.status_code}")
    try:
        models = client.get(f"{url}/v1/models", timeout=PROBE_TIMEOUT_SECONDS)
        ids = [card.get("id") for card in models.json().get("data", [])]
    except (httpx.HTTPError, ValueError):
        return Probe(Phase.WARMING, "/v1/models not answering yet")
    if served_name not in ids:
        return Probe(Phase.WARMING, f"/v1/models lists {ids}, not {served_name!r}")
    return Probe(Phase.READY, "healthy and serving " + served_name)


def wait_ready(
    engine: Engine,
    container_id: str,
    url: str,
    served_name: str,
    timeout_seconds: float,
    poll_seconds: float,
    on_progress: Callable[[Probe, float, str], None],
) -> float:
    """Poll until ready; raise LaunchError if the container exits or time runs out."""
    started = time.monotonic()
    with httpx.Client() as client:
        while True:
            elapsed = time.monotonic() - started
            info = engine.inspect(container_id)
            if info.status not in {"created", "running"}:
                raise _died_while_loading(engine, info)
            state = probe(client, url, served_name)
            last_line = _last_log_line(engine, container_id)
            on_progress(state, elapsed, last_line)
            if state.phase is Phase.READY:
                return elapsed
            if elapsed > timeout_seconds:
                raise LaunchError(
                    f"not ready after {timeout_seconds:.0f} s (last phase: {state.phase}: "
                    f"{state.detail}); container removed",
                    hint="raise --timeout or readiness.timeout_seconds; `opsctl logs` won't help "
                    "now, rerun `up` and watch the log line",
                )
            time.sleep(poll_seconds)


def _last_log_line(engine: Engine, container_id: str) -> str:
    lines = [line for line in engine.logs(container_id, tail=5).splitlines() if line.strip()]
    return lines[-1][-160:] if lines else ""


def _died_while_loading(engine: Engine, info: ContainerInfo) -> LaunchError:
    log = engine.logs(info.id, tail=200)
    lines = log.splitlines()
    telling = [line for line in lines if _RECOGNISABLE.search(line)][-5:]
    tail = lines[-15:]
    first = (telling or tail or ["(no output)"])[-1].strip()[:200]
    return LaunchError(
        f"server exited before it was ready (exit code {info.exit_code}): {first}; container removed",
        hint="log lines that matter are printed above; fix the cause and run `opsctl up` again",
        details=[*telling, "--- log tail ---", *tail],
    )


# --- commands ----------------------------------------------------------------------------------


def up(
    deployment: Deployment,
    image: str,
    engine: Engine,
    timeout_seconds: float | None = None,
    replace: bool = False,
    on_progress: Callable[[Probe, float, str], None] = lambda *_: None,
) -> Running:
    """Start the deployment and wait until it truly serves. Leaves nothing behind on failure."""
    image_labels = engine.image_labels(image)
    if image_labels is None:
        raise LaunchError(
            f"image {image} is not present on this engine",
            hint=f"build it: `opsctl build --profile {deployment.profile.name}` "
            "(opsctl never pulls an image it builds)",
        )
    spec = run_spec(deployment, image, image_labels)
    url = base_url(deployment)
    existing = engine.find({"opsctl.profile": deployment.profile.name, ROLE_LABEL: SERVER_ROLE})
    for info in existing:
        same = info.labels.get("opsctl.config-hash") == spec.labels["opsctl.config-hash"]
        if same and info.status == "running" and not replace:
            return Running(container=info, base_url=url, already_up=True, elapsed_seconds=0.0)
        if not replace and info.status == "running":
            raise LaunchError(
                f"profile {deployment.profile.name!r} is already up with another configuration "
                f"(variant {info.labels.get('opsctl.variant')!r})",
                hint="pass --replace to swap it, or `opsctl down` first",
            )
        engine.stop_and_remove(info.id, _grace(info))
    timeout = timeout_seconds or deployment.profile.readiness.timeout_seconds
    try:
        info = engine.run(spec)
        elapsed = wait_ready(
            engine, info.id, url, deployment.profile.model.served_name, timeout,
            deployment.profile.readiness.poll_interval_seconds, on_progress,
        )
    except BaseException:
        # Failure, timeout and Ctrl-C (even one that lands while the container is being created
        # or started) all leave nothing running: any server of this profile now is ours.
        for leftover in engine.find({"opsctl.profile": deployment.profile.name, ROLE_LABEL: SERVER_ROLE}):
            engine.stop_and_remove(leftover.id, grace_seconds=5)
        raise
    return Running(container=engine.inspect(info.id), base_url=url, already_up=False,
                   elapsed_seconds=elapsed)


def find_servers(engine: Engine, profile_name: str | None = None) -> list[ContainerInfo]:
    labels = {ROLE_LABEL: SERVER_ROLE}
    if profile_name:
        labels["opsctl.profile"] = profile_name
    return engine.find(labels)


def down(engine: Engine, profile_name: str | None, grace_seconds: int | None = None) -> list[str]:
    """Stop and remove opsctl's server containers (of one profile, or all); returns their names."""
    removed = []
    for info in find_servers(engine, profile_name):
        engine.stop_and_remove(info.id, grace_seconds if grace_seconds is not None else _grace(info))
        removed.append(info.name)
    return removed


def base_url_for(engine: Engine, profile_name: str) -> str:
    """URL of the profile's running server, found by label (LaunchError when none runs)."""
    running = [i for i in find_servers(engine, profile_name) if i.status == "running"]
    if not running:
        raise LaunchError(
            f"no running opsctl server for profile {profile_name!r}",
            hint=f"start it with `opsctl up --profile {profile_name}`, or pass --base-url",
        )
    return running[0].labels["opsctl.base-url"]


def uptime(info: ContainerInfo, now: datetime | None = None) -> str:
    if info.status != "running" or not info.started_at:
        return "-"
    started = datetime.fromisoformat(info.started_at[:26].rstrip("Z") + "+00:00")
    seconds = int(((now or datetime.now(UTC)) - started).total_seconds())
    hours, rest = divmod(max(seconds, 0), 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s"


def readiness_of(info: ContainerInfo) -> str:
    if info.status != "running":
        return f"{info.status} (exit {info.exit_code})"
    with httpx.Client() as client:
        return probe(client, info.labels.get("opsctl.base-url", ""),
                     info.labels.get("opsctl.served-model", "")).phase.value


def _grace(info: ContainerInfo) -> int:
    return int(info.labels.get("opsctl.stop-grace-seconds", "30"))
