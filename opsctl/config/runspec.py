"""Deployment -> RunSpec: the container a variant runs in, derived from the profile alone.

Pure (no engine, no network), so every profile and variant is golden-tested as a `docker run`
line. The labels written here are how `down`, `status`, `smoke` and the exporter find the server
again: they are the only record of what runs.

A server runs unattended for weeks, so the container also heals and keeps its log bounded: the
restart policy on-failure:N (`container.restart_max`), a HEALTHCHECK of sglang's `/health` and
json-file log rotation (`container.log_max_size` x `log_max_files`).

Why `/health` and not `/health_generate`: in the pinned release the two paths are one handler
(sglang/srt/entrypoints/http_server.py: 0.5.23 lines 721-722) that, by
default, submits a one-token generation whenever the server is idle and waits up to 20 s for
the scheduler. Only for the path `/health`, and only with SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION
false (srt/environ.py; 0.5.23 line 344), does it answer at once: 503 while
starting or shutting down, else 200, with no generation. A check every 30 s should not put a
request into the scheduler, so the container gets that variable (a profile may set it to true
to probe generation instead). Readiness still asks `/health_generate`, once, at start. sglang
never asks for a key on /health* (srt/utils/auth.py), and the check is python3's urllib (in the
sglang and the simulator images; no curl assumed), never through a proxy.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

from opsctl import __version__
from opsctl.config.profiles import Deployment, check_argv
from opsctl.core import labels
from opsctl.engine.api import HealthCheck, LogRotation, Mount, PortBinding, RunSpec

# What a stopped server's label says when the image carried no patch set.
NO_PATCH = "none"
HEALTH_PATH = "/health"
HEALTH_GENERATION_ENV = "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"


def container_name(deployment: Deployment) -> str:
    return f"opsctl-{deployment.profile.name}"


def base_url(deployment: Deployment) -> str:
    address = deployment.profile.container.publish_address
    # A server published on every interface is still reached from here over loopback.
    host = "127.0.0.1" if address in {"0.0.0.0", "::", ""} else address
    return f"http://{host}:{deployment.profile.container.host_port}"


def health_check(deployment: Deployment) -> HealthCheck:
    """The HEALTHCHECK: sglang's /health inside the container, bounded by the profile's timeout;
    failures during the load (readiness.timeout_seconds) do not count."""
    container, server = deployment.profile.container, deployment.server
    host = server.host if server.host not in {"0.0.0.0", "::", ""} else "127.0.0.1"
    url = f"http://{f'[{host}]' if ':' in host else host}:{server.port}{HEALTH_PATH}"
    # Double quotes hold the code for /bin/sh (it has no $, `, \ or "), the URL comes as an
    # argument: the command line needs no single quotes, so `docker run` shows it plainly.
    code = ("import sys, urllib.request as u; sys.exit(0 if u.build_opener(u.ProxyHandler({}))"
            f".open(sys.argv[1], timeout={container.health_timeout_seconds}).status == 200 "
            "else 1)")
    return HealthCheck(
        command=f'python3 -c "{code}" {url}',
        interval_seconds=container.health_interval_seconds,
        timeout_seconds=container.health_timeout_seconds,
        retries=container.health_retries,
        start_period_seconds=max(1, math.ceil(deployment.profile.readiness.timeout_seconds)),
    )


def server_labels(profile_name: str | None = None) -> dict[str, str]:
    """The labels that select opsctl's servers (of one profile, or all)."""
    wanted = {labels.ROLE: labels.ROLE_SERVER}
    if profile_name:
        wanted[labels.PROFILE] = profile_name
    return wanted


def deployment_labels(
    deployment: Deployment, image: str, image_labels: dict[str, str]
) -> dict[str, str]:
    return {
        labels.MANAGED: labels.TRUE,
        **server_labels(deployment.profile.name),
        labels.VARIANT: deployment.variant,
        labels.IMAGE: image,
        labels.SGLANG_VERSION: deployment.image.sglang_version,
        labels.PATCH_SHA256: image_labels.get(labels.PATCH_SHA256, NO_PATCH),
        labels.CONFIG_HASH: deployment.config_hash(),
        labels.SERVED_MODEL: deployment.model.served_name,
        labels.BASE_URL: base_url(deployment),
        labels.STOP_GRACE_SECONDS: str(deployment.profile.container.stop_grace_seconds),
        labels.VERSION: __version__,
        **({labels.SECRET_ENV: ",".join(named)} if (named := secret_env_names(deployment)) else {}),
    }


def cache_volume(base: str, image: str) -> str:
    """The JIT-cache volume of one image: `base` keyed by its reference (12 hex digits of its
    sha256), so kernels one image's flashinfer/triton compiled are never loaded by another's
    (opsctl's own tags are content hashes: a rebuilt image gets a fresh cache)."""
    return f"{base}-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def secret_env_names(deployment: Deployment) -> list[str]:
    """The host variables whose values the server is given (names only, each once)."""
    server, container = deployment.server, deployment.profile.container
    named = [server.api_key_env, server.admin_api_key_env, *container.env_from_host]
    return list(dict.fromkeys(name for name in named if name))


def run_spec(deployment: Deployment, image: str, image_labels: dict[str, str] | None = None,
             environ: Mapping[str, str] | None = None) -> RunSpec:
    """Everything about the container, derived from the profile; golden-tested per variant.

    Secrets the profile names by variable (server.api_key_env, container.env_from_host) take
    their values from `environ` (the host's, at launch); without it they stay `$NAME`, which is
    what `--dry-run` shows. Labels never hold a value.
    """
    profile = deployment.profile
    container = profile.container
    mounts = []
    if deployment.model.host_path:
        mounts.append(
            Mount(
                source=deployment.model.host_path,
                target=deployment.model.container_path,
                read_only=True,
            )
        )
    if container.cache_volume:
        mounts.append(Mount(source=cache_volume(container.cache_volume, image),
                            target=container.cache_mount, kind="volume"))
    ulimits: dict[str, tuple[int, int]] = {}
    if container.memlock_unlimited:
        ulimits["memlock"] = (-1, -1)
    if container.stack_bytes:
        ulimits["stack"] = (container.stack_bytes, container.stack_bytes)
    return RunSpec(
        image=image,
        command=check_argv(deployment, environ),
        name=container_name(deployment),
        labels=deployment_labels(deployment, image, image_labels or {}),
        env={HEALTH_GENERATION_ENV: "false", **deployment.env, **deployment.host_env(environ)},
        ports=[
            PortBinding(
                container_port=deployment.server.port,
                host_port=container.host_port,
                host_address=container.publish_address,
            )
        ],
        mounts=mounts,
        gpus=list(container.gpus),
        ipc_host=container.ipc_host,
        shm_size=None if container.ipc_host else container.shm_size,
        ulimits=ulimits,
        init=True,
        stop_grace_seconds=container.stop_grace_seconds,
        restart_max=container.restart_max,
        healthcheck=health_check(deployment),
        log_rotation=LogRotation(
            max_size=container.log_max_size, max_files=container.log_max_files
        ),
    )
