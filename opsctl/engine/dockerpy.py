"""The one seam to Docker. Every other module talks to the engine through `Engine` only.

The Docker SDK does everything here: containers, logs, images, volumes and builds. Builds use
the engine's classic builder through the SDK (`api.build`), which is enough because the image
build needs no secret and no network (all inputs are staged into the context); BuildKit, and so
the `docker buildx` CLI, is not needed. opsctl never pulls: containers are created with
`containers.create` (which, unlike `containers.run`, does not fall back to a pull) and builds pass
`pull=False`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests

from opsctl.core.errors import BuildError, DaemonUnreachable, LaunchError

MANAGED_LABEL = "opsctl.managed"
DAEMON_TIMEOUT_SECONDS = 10


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
class RunSpec:
    """Everything `docker run` needs, as plain data: rendered and golden-tested without an engine."""

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

    def docker_run_argv(self) -> list[str]:
        """The equivalent `docker run` command, for --dry-run and for humans."""
        argv = ["docker", "run", "--detach", "--name", self.name]
        if self.init:
            argv.append("--init")
        for key, value in sorted(self.labels.items()):
            argv += ["--label", f"{key}={value}"]
        for key, value in sorted(self.env.items()):
            argv += ["--env", f"{key}={value}"]
        for port in self.ports:
            argv += ["--publish", f"{port.host_address}:{port.host_port}:{port.container_port}"]
        for mount in self.mounts:
            option = f"type={mount.kind},source={mount.source},target={mount.target}"
            argv += ["--mount", option + (",readonly" if mount.read_only else "")]
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
        argv += ["--stop-timeout", str(self.stop_grace_seconds), self.image, *self.command]
        return argv


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    status: str  # created, running, exited, ...
    exit_code: int | None
    labels: dict[str, str]
    image: str
    started_at: str


@dataclass(frozen=True)
class BuildEvent:
    """One line of build progress: a step header, output, or the final error."""

    text: str
    step: str | None = None
    error: str | None = None


# Docker's own words for failures a user can cause, mapped to what to do about them.
_PORT_TAKEN = re.compile(r"port is already allocated|address already in use|bind for .* failed", re.I)
_NO_GPU_RUNTIME = re.compile(r"could not select device driver|nvidia-container-cli|unknown runtime", re.I)


class Engine:
    """A connected Docker engine. Create with `Engine.connect()`; fails fast with exit 6."""

    def __init__(self, client: docker.DockerClient) -> None:
        self._client = client

    @classmethod
    def connect(cls, timeout: float = DAEMON_TIMEOUT_SECONDS) -> Engine:
        try:
            client = docker.from_env(timeout=int(timeout))
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            reason = str(exc).splitlines()[0][:200]
            raise DaemonUnreachable(
                f"Docker daemon unreachable: {reason}",
                hint="start it (e.g. `dockerd --iptables=false &` or `systemctl start docker`) "
                "or check DOCKER_HOST",
            ) from None
        return cls(client)

    # --- containers ---------------------------------------------------------------------------

    def run(self, spec: RunSpec) -> ContainerInfo:
        """Create and start a container; on any failure nothing is left behind."""
        kwargs = self._create_kwargs(spec)
        try:
            container = self._client.containers.create(**kwargs)
        except docker.errors.ImageNotFound:
            raise LaunchError(
                f"image {spec.image} is not present on this engine",
                hint="build it first with `opsctl build` (opsctl never pulls an image it builds)",
            ) from None
        except docker.errors.APIError as exc:
            raise self._launch_error(exc, spec) from None
        try:
            container.start()
        except docker.errors.APIError as exc:
            self._remove_quietly(container.id)
            raise self._launch_error(exc, spec) from None
        return self.inspect(container.id)

    def _create_kwargs(self, spec: RunSpec) -> dict[str, Any]:
        mounts = [
            docker.types.Mount(
                target=m.target, source=m.source, type=m.kind, read_only=m.read_only
            )
            for m in spec.mounts
        ]
        device_requests = []
        if spec.gpus:
            device_requests.append(
                docker.types.DeviceRequest(
                    device_ids=[str(g) for g in spec.gpus], capabilities=[["gpu"]]
                )
            )
        ulimits = [
            docker.types.Ulimit(name=name, soft=soft, hard=hard)
            for name, (soft, hard) in spec.ulimits.items()
        ]
        return {
            "image": spec.image,
            "command": spec.command,
            "name": spec.name,
            "labels": spec.labels,
            "environment": spec.env,
            "ports": {f"{p.container_port}/tcp": (p.host_address, p.host_port) for p in spec.ports},
            "mounts": mounts,
            "device_requests": device_requests or None,
            "ipc_mode": "host" if spec.ipc_host else None,
            "shm_size": spec.shm_size,
            "ulimits": ulimits or None,
            "init": spec.init,
            "stop_signal": "SIGTERM",
            "network_mode": spec.network_mode,
        }

    def _launch_error(self, exc: docker.errors.APIError, spec: RunSpec) -> LaunchError:
        text = str(exc.explanation or exc)
        if _PORT_TAKEN.search(text):
            ports = ", ".join(f"{p.host_address}:{p.host_port}" for p in spec.ports)
            return LaunchError(
                f"host port already taken ({ports})",
                hint="stop what listens there, or change container.host_port in the profile",
            )
        if _NO_GPU_RUNTIME.search(text):
            return LaunchError(
                f"the engine cannot give GPUs {spec.gpus} to a container: {text.splitlines()[0]}",
                hint="install the NVIDIA Container Toolkit and restart dockerd; "
                "opsctl never falls back to CPU",
            )
        if exc.status_code == 409:
            return LaunchError(
                f"a container named {spec.name} already exists",
                hint="`opsctl status` shows it; `opsctl down` removes opsctl's containers",
            )
        return LaunchError(f"docker refused to start the container: {text.splitlines()[0]}",
                           hint="see the engine's message above")

    def inspect(self, container_id: str) -> ContainerInfo:
        container = self._client.containers.get(container_id)
        state = container.attrs.get("State", {})
        return ContainerInfo(
            id=container.id,
            name=container.name,
            status=state.get("Status", container.status),
            exit_code=state.get("ExitCode") if state.get("Status") == "exited" else None,
            labels=container.labels,
            image=container.attrs.get("Config", {}).get("Image", ""),
            started_at=state.get("StartedAt", ""),
        )

    def find(self, labels: dict[str, str]) -> list[ContainerInfo]:
        """Containers carrying all of `labels` (and opsctl's managed label), running or not."""
        wanted = {MANAGED_LABEL: "true", **labels}
        filters = {"label": [f"{k}={v}" for k, v in wanted.items()]}
        found = self._client.containers.list(all=True, filters=filters)
        return [self.inspect(c.id) for c in found]

    def logs(self, container_id: str, tail: int | str = "all") -> str:
        container = self._client.containers.get(container_id)
        return container.logs(tail=tail).decode(errors="replace")

    def follow_logs(self, container_id: str, tail: int | str = 10) -> Iterator[str]:
        container = self._client.containers.get(container_id)
        for chunk in container.logs(stream=True, follow=True, tail=tail):
            yield chunk.decode(errors="replace")

    def stop_and_remove(self, container_id: str, grace_seconds: int) -> None:
        try:
            container = self._client.containers.get(container_id)
            if container.status == "running":
                container.stop(timeout=grace_seconds)
            container.remove(force=True)
        except docker.errors.NotFound:
            return

    def _remove_quietly(self, container_id: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self._client.containers.get(container_id).remove(force=True)

    # --- images (issue 4 adds what builds need below) --------------------------------------

    def image_labels(self, ref: str) -> dict[str, str] | None:
        """The image's labels, or None when the engine does not have it."""
        try:
            image = self._client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        return dict(image.labels or {})

    def image_id(self, ref: str) -> str | None:
        try:
            return self._client.images.get(ref).id
        except docker.errors.ImageNotFound:
            return None

    def image_repo_digests(self, ref: str) -> list[str]:
        try:
            return list(self._client.images.get(ref).attrs.get("RepoDigests") or [])
        except docker.errors.ImageNotFound:
            return []

    def pull_image(self, ref: str) -> list[str]:
        """Pull a third-party image (monitoring only; opsctl never pulls what it builds).

        Returns its repo digests, which the caller records in a lock file and checks later.
        """
        try:
            self._client.images.pull(ref)
        except docker.errors.APIError as exc:
            raise LaunchError(
                f"cannot pull {ref}: {str(exc.explanation or exc).splitlines()[0][:200]}",
                hint="check the registry is reachable from this host, or load the image with "
                "`docker load`",
            ) from None
        return self.image_repo_digests(ref)

    def remove_image(self, ref: str) -> None:
        try:
            self._client.images.remove(ref, force=True, noprune=False)
        except docker.errors.ImageNotFound:
            return

    def find_images(self, labels: dict[str, str]) -> list[str]:
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        return [img.id for img in self._client.images.list(filters=filters)]

    def remove_image_if_unused(self, image_id: str) -> bool:
        """Delete an untagged image (a failed build's layer) unless something still uses it.

        Unlike `remove_image` this never forces: a layer that is the parent of another image
        or is used by a container stays, so the cache of other builds is not destroyed.
        """
        try:
            if self._client.images.get(image_id).tags:
                return False
            self._client.images.remove(image_id, force=False, noprune=False)
        except docker.errors.ImageNotFound:
            return True
        except docker.errors.APIError:
            return False
        return True

    def import_rootfs(self, tarball: Path, repository: str, tag: str, changes: list[str]) -> str:
        """`docker import` a root filesystem tarball as repository:tag; returns the image id."""
        try:
            self._client.api.import_image(
                src=str(tarball), repository=repository, tag=tag, changes=changes
            )
        except docker.errors.APIError as exc:
            raise BuildError(
                f"the engine refused to import {repository}:{tag}: "
                f"{str(exc.explanation or exc).splitlines()[0]}",
                hint="check the engine's log (journalctl -u docker) and free disk space",
            ) from None
        image_id = self.image_id(f"{repository}:{tag}")
        if image_id is None:
            raise BuildError(f"import of {repository}:{tag} reported no image", hint="retry with --force")
        return image_id

    def build(
        self,
        context_dir: Path,
        dockerfile: str,
        tag: str,
        build_args: dict[str, str],
        labels: dict[str, str],
        on_event: Callable[[BuildEvent], None],
    ) -> str:
        """Build `tag` from `context_dir`; streams progress to `on_event`; returns the image id.

        Intermediate containers are always removed (forcerm), so a failed build leaves no
        container; the caller removes the tag if verification later fails.
        """
        last_step: str | None = None
        tail: list[str] = []
        try:
            stream = self._client.api.build(
                path=str(context_dir),
                dockerfile=dockerfile,
                tag=tag,
                buildargs=build_args,
                labels=labels,
                pull=False,
                rm=True,
                forcerm=True,
                decode=True,
            )
            for chunk in stream:
                if "error" in chunk:
                    detail = str(chunk.get("error", "")).strip()
                    on_event(BuildEvent(text=detail, step=last_step, error=detail))
                    raise BuildError(
                        f"build failed at {last_step or 'the first step'}: {detail.splitlines()[-1]}",
                        hint="the log tail above shows the failing step's output",
                    )
                text = str(chunk.get("stream", "")).rstrip("\n")
                if not text:
                    continue
                if text.startswith("Step "):
                    last_step = text
                tail = (tail + [text])[-40:]
                on_event(BuildEvent(text=text, step=last_step))
        except docker.errors.APIError as exc:
            raise BuildError(
                f"the engine refused the build: {str(exc.explanation or exc).splitlines()[0]}",
                hint="check the Dockerfile and the build context",
            ) from None
        image_id = self.image_id(tag)
        if image_id is None:
            raise BuildError(f"build of {tag} reported no image", hint="\n".join(tail[-5:]))
        return image_id

    def run_to_completion(
        self, image: str, command: list[str], timeout_seconds: float = 120
    ) -> tuple[int, str]:
        """Run a throwaway container (no network, no GPU) and return (exit code, output)."""
        try:
            container = self._client.containers.create(
                image=image, command=command, network_disabled=True, detach=True,
                labels={MANAGED_LABEL: "true", "opsctl.role": "verify"},
            )
        except docker.errors.ImageNotFound:
            raise BuildError(f"image {image} vanished before verification", hint="rebuild") from None
        try:
            container.start()
            result = container.wait(timeout=max(1, int(timeout_seconds)))
            output = container.logs().decode(errors="replace")
            return int(result.get("StatusCode", 1)), output
        except requests.exceptions.RequestException:
            return 124, "verification container timed out"
        finally:
            self._remove_quietly(container.id)
