"""What opsctl asks of a container engine, as plain data and one Protocol.

Every room types its engine argument with `Engine`; `opsctl.engine.dockerpy` is the real
implementation and `tests/fakes.py` an in-memory one. Both raise the errors defined at the bottom,
so a user sees the same message whichever engine ran.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from opsctl.core.errors import LaunchError


@dataclass(frozen=True)
class PortBinding:
    container_port: int
    host_port: int
    host_address: str = "127.0.0.1"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False
    kind: str = "bind"  # or "volume"


@dataclass(frozen=True)
class HealthCheck:
    """A Docker HEALTHCHECK: `command` is a /bin/sh command line run inside the container, as
    `docker run --health-cmd` takes it; exit 0 is healthy."""

    command: str
    interval_seconds: int
    timeout_seconds: int
    retries: int
    start_period_seconds: int  # failures while the server loads do not count


@dataclass(frozen=True)
class LogRotation:
    """The json-file log driver with rotation: at most `max_files` files of `max_size`."""

    max_size: str  # Docker size, e.g. 100m
    max_files: int


@dataclass(frozen=True)
class RunSpec:
    """Everything `docker run` needs, as plain data: rendered and golden-tested without an
    engine."""

    image: str
    command: list[str]
    name: str
    labels: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    ports: list[PortBinding] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    ipc_host: bool = False
    shm_size: str | None = None
    ulimits: dict[str, tuple[int, int]] = field(default_factory=dict)
    init: bool = True
    stop_grace_seconds: int = 10
    network_mode: str | None = None  # "host" for monitoring that must reach loopback targets
    # None: the engine's defaults (no restart, no health check, its own log driver).
    restart_max: int | None = None  # on-failure:N; 0 renders "no"
    healthcheck: HealthCheck | None = None
    log_rotation: LogRotation | None = None

    def docker_run_argv(self) -> list[str]:
        """The equivalent `docker run` command, for --dry-run and for humans."""
        argv = ["docker", "run", "--detach", "--name", self.name]
        argv += self._wiring_argv() + self._resource_argv()
        argv += self._restart_argv() + self._health_argv() + self._log_argv()
        argv += ["--stop-timeout", str(self.stop_grace_seconds), self.image, *self.command]
        return argv

    def _wiring_argv(self) -> list[str]:
        """--init, labels, environment, published ports and mounts."""
        argv = ["--init"] if self.init else []
        for key, value in sorted(self.labels.items()):
            argv += ["--label", f"{key}={value}"]
        for key, value in sorted(self.env.items()):
            argv += ["--env", f"{key}={value}"]
        for port in self.ports:
            argv += ["--publish", f"{port.host_address}:{port.host_port}:{port.container_port}"]
        for mount in self.mounts:
            option = f"type={mount.kind},source={mount.source},target={mount.target}"
            argv += ["--mount", option + (",readonly" if mount.read_only else "")]
        return argv

    def _resource_argv(self) -> list[str]:
        """GPUs, IPC namespace, shared memory, ulimits and network."""
        argv = []
        if self.gpus:
            argv += ["--gpus", '"device=' + ",".join(str(g) for g in self.gpus) + '"']
        if self.ipc_host:
            argv += ["--ipc", "host"]
        if self.shm_size:
            argv += ["--shm-size", self.shm_size]
        for name, (soft, hard) in sorted(self.ulimits.items()):
            argv += ["--ulimit", f"{name}={soft}:{hard}"]
        if self.network_mode:
            argv += ["--network", self.network_mode]
        return argv

    def _restart_argv(self) -> list[str]:
        if self.restart_max is None:
            return []
        return ["--restart", f"on-failure:{self.restart_max}" if self.restart_max else "no"]

    def _health_argv(self) -> list[str]:
        check = self.healthcheck
        if not check:
            return []
        return ["--health-cmd", check.command,
                "--health-interval", f"{check.interval_seconds}s",
                "--health-timeout", f"{check.timeout_seconds}s",
                "--health-retries", str(check.retries),
                "--health-start-period", f"{check.start_period_seconds}s"]

    def _log_argv(self) -> list[str]:
        rotation = self.log_rotation
        if not rotation:
            return []
        return ["--log-driver", "json-file",
                "--log-opt", f"max-size={rotation.max_size}",
                "--log-opt", f"max-file={rotation.max_files}"]


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    status: str  # created, running, exited, ...
    exit_code: int | None
    labels: dict[str, str]
    image: str
    started_at: str
    restart_count: int = 0  # restarts by the engine's restart policy (Docker's RestartCount)
    health: str = ""  # the HEALTHCHECK's status: starting, healthy, unhealthy; "" without one
    health_log: str = ""  # the last check's output (why it is unhealthy)
    restart_max: int = 0  # the restart policy's on-failure:N; 0 without a restart policy
    finished_at: str = ""  # when it last exited ("" when it never did)
    # Why it last exited: the exit code (of a running container restarted by its policy, the
    # run before; None when never or unknown), killed for memory, the engine's error.
    last_exit_code: int | None = None
    oom_killed: bool = False
    error: str = ""
    ports: tuple[PortBinding, ...] = ()  # what it publishes on the host


@dataclass(frozen=True)
class ExecResult:
    """A command run inside a running container (`docker exec`).

    `output` is its stdout and stderr as written, cut to the last `max_output_bytes` (then
    `truncated`). `timed_out`: it was still running at the deadline; opsctl stopped waiting and
    `exit_code` is None (also None when the daemon never recorded one). Docker cannot stop an
    exec'd process, so a command that must not outlive its deadline runs under `timeout` inside
    the container.
    """

    exit_code: int | None
    output: bytes
    truncated: bool = False
    timed_out: bool = False


@dataclass(frozen=True)
class EngineInfo:
    """What the engine says about itself (`docker version` and `docker info`)."""

    version: str  # the server's version, e.g. 27.3.1
    api_version: str
    runtimes: tuple[str, ...] = ()  # registered OCI runtimes: runc, nvidia, ...
    default_runtime: str = ""
    cdi_spec_dirs: tuple[str, ...] = ()  # where the engine reads CDI specs (Docker 25+), if on
    root_dir: str = ""  # where it keeps images and containers (DockerRootDir)


# An image digest as a registry answers it (what `Engine.push` returns).
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class BuildEvent:
    """One line of build progress: a step header, output, or the final error."""

    text: str
    step: str | None = None
    error: str | None = None


class Engine(Protocol):
    """The container engine as opsctl uses it. Containers are found by label, never by name."""

    # --- containers ---

    def run(self, spec: RunSpec) -> ContainerInfo:
        """Create and start a container; on any failure nothing is left behind (LaunchError)."""
        ...

    def inspect(self, container_id: str) -> ContainerInfo:
        """ContainerGone when the engine has no such container."""
        ...

    def find(self, labels: dict[str, str]) -> list[ContainerInfo]:
        """Containers carrying all of `labels` and opsctl's managed label, running or not."""
        ...

    def logs(self, container_id: str, tail: int | str = "all") -> str: ...

    def follow_logs(self, container_id: str, tail: int | str = 10) -> Iterator[str]: ...

    def stop_and_remove(self, container_id: str, grace_seconds: int) -> None:
        """Stop (SIGTERM, then kill after the grace) and remove; a container already gone is
        fine."""
        ...

    def stop(self, container_id: str, grace_seconds: int) -> None:
        """SIGTERM, then kill after the grace; a stopped or vanished container is fine."""
        ...

    def remove(self, container_id: str) -> None:
        """Remove a container (killing it if it still runs); one already gone is fine."""
        ...

    def log_chunks(self, container_id: str) -> Iterator[bytes]:
        """The whole log (stdout and stderr, each line prefixed with its timestamp) as it
        arrives, so a long log is never held in memory; DaemonUnreachable when the engine stops
        answering in the middle."""
        ...

    def exec(self, container_id: str, command: list[str], *, env: dict[str, str],
             timeout_seconds: float, max_output_bytes: int) -> ExecResult:
        """Run `command` (no shell, no TTY) in the running container with `env` added; never
        waits past `timeout_seconds` nor holds more than `max_output_bytes` of its output.
        LaunchError when the container is gone or not running."""
        ...

    def archive(self, container_id: str, path: str, max_bytes: int) -> bytes | None:
        """A tar of `path` inside the container (`docker cp`); None when it does not exist.
        LaunchError when the tar would exceed `max_bytes`."""
        ...

    def run_to_completion(
        self, image: str, command: list[str], timeout_seconds: float = 120,
        mounts: tuple[Mount, ...] = (), gpus: bool = False,
    ) -> tuple[int, str]:
        """Run a throwaway container (no network, no GPU unless `gpus`: then every GPU, as
        `docker run --gpus all`; `mounts` bound) and remove it, whatever happens; returns (exit
        code, output), (124, ...) past `timeout_seconds`, (125, the engine's words) when the
        engine refuses to give it GPUs."""
        ...

    def info(self) -> EngineInfo:
        """The engine's version, runtimes, CDI spec folders and data root."""
        ...

    # --- images ---

    def image_labels(self, ref: str) -> dict[str, str] | None:
        """The image's labels, or None when the engine does not have it."""
        ...

    def image_id(self, ref: str) -> str | None: ...

    def image_repo_digests(self, ref: str) -> list[str]: ...

    def image_env(self, ref: str) -> dict[str, str] | None:
        """The environment the image's config sets (CUDA_VERSION in NVIDIA's images), or None
        when the engine does not have it."""
        ...

    def pull_image(self, ref: str) -> list[str]:
        """Pull a third-party image; returns its repo digests (LaunchError when it cannot)."""
        ...

    def remove_image(self, ref: str) -> None: ...

    def remove_image_if_unused(self, image_id: str) -> bool:
        """Delete an untagged image unless something still uses it; True when it is gone."""
        ...

    def tag_image(self, image_id: str, ref: str) -> None:
        """Point `ref` (repository:tag) at the image `image_id` (`docker tag`)."""
        ...

    def import_rootfs(self, tarball: Path, repository: str, tag: str, changes: list[str]) -> str:
        """`docker import` a root filesystem tarball as repository:tag; returns the image id."""
        ...

    def build(
        self,
        context_dir: Path,
        dockerfile: str,
        tag: str,
        build_args: dict[str, str],
        labels: dict[str, str],
        on_event: Callable[[BuildEvent], None],
    ) -> str:
        """Build `tag` from `context_dir`, streaming progress; returns the image id (BuildError)."""
        ...

    def push(self, image: str, target: str, on_event: Callable[[BuildEvent], None]) -> str:
        """Tag `image` as `target` (REGISTRY/REPO:TAG) and push it with docker's own credentials,
        streaming progress; returns the digest (sha256:...) the registry answered. BuildError
        when the registry refuses or cannot be reached."""
        ...


# --- errors every implementation raises for the same cause -----------------------------------


def image_missing(ref: str) -> LaunchError:
    return LaunchError(
        f"image {ref} is not present on this engine",
        hint="build it first with `opsctl build` (opsctl never pulls an image it builds)",
    )


def port_taken(spec: RunSpec) -> LaunchError:
    ports = ", ".join(f"{p.host_address}:{p.host_port}" for p in spec.ports)
    return LaunchError(
        f"host port already taken ({ports})",
        hint="stop what listens there, or change container.host_port in the profile",
    )


def name_taken(spec: RunSpec) -> LaunchError:
    return LaunchError(
        f"a container named {spec.name} already exists",
        hint="`opsctl status` shows it; `opsctl down` removes opsctl's containers",
    )
