"""The Docker implementation of `opsctl.engine.api.Engine`; `connect()` is the only way in.

The Docker SDK does everything here: containers, logs, images, volumes and builds. Builds use
the engine's classic builder through the SDK (`api.build`), which is enough because the image
build needs no secret and no network (all inputs are staged into the context); BuildKit, and so
the `docker buildx` CLI, is not needed. opsctl never pulls: containers are created with
`containers.create` (which, unlike `containers.run`, does not fall back to a pull) and builds pass
`pull=False`.

Every call is bounded by the client's timeout (a daemon that hangs fails the call instead of
blocking opsctl), and a daemon that stops answering or fails mid-call raises DaemonUnreachable
(exit 6) with one line, never the SDK's chained traceback.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests

from opsctl.core.errors import BuildError, DaemonUnreachable, LaunchError
from opsctl.core.labels import MANAGED, ROLE, ROLE_VERIFY, TRUE
from opsctl.engine import dockerimages
from opsctl.engine.api import BuildEvent, ContainerInfo, Engine, ExecResult, Mount, RunSpec, image_missing
from opsctl.engine.dockercalls import (
    LOG_FRAME_HEADER,
    TRANSPORT,
    answering,
    create_kwargs,
    docker_mounts,
    launch_error,
    published_ports,
    read_exactly,
    run_exec,
)

DAEMON_TIMEOUT_SECONDS = 10


def connect(timeout: float = DAEMON_TIMEOUT_SECONDS) -> Engine:
    """The engine DOCKER_HOST (or the local socket) names; DaemonUnreachable (exit 6) fast."""
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
    return DockerEngine(client)


class DockerEngine:
    """A connected Docker engine (see `connect`)."""

    def __init__(self, client: docker.DockerClient) -> None:
        self._client = client

    # --- containers ---------------------------------------------------------------------------

    def run(self, spec: RunSpec) -> ContainerInfo:
        """Create and start a container; on any failure nothing is left behind."""
        with answering(f"creating {spec.name}"):
            try:
                container = self._create(create_kwargs(spec))
            except docker.errors.ImageNotFound:
                raise image_missing(spec.image) from None
            except docker.errors.APIError as exc:
                raise launch_error(exc, spec) from None
        with answering(f"starting {spec.name}"):
            try:
                container.start()
            except docker.errors.APIError as exc:
                self._remove_quietly(container.id)
                raise launch_error(exc, spec) from None
        return self.inspect(container.id)

    def _create(self, kwargs: dict[str, Any]) -> Any:
        """`containers.create` in a worker thread, so that a Ctrl-C while the engine is still
        creating waits for its answer (bounded by the client's timeout) and removes what it
        created, instead of abandoning the call and leaving a Created container behind."""
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["container"] = self._client.containers.create(**kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                outcome["error"] = exc

        worker = threading.Thread(target=work, name="opsctl-create", daemon=True)
        worker.start()
        try:
            worker.join()
        except BaseException:
            worker.join(self._client.api.timeout + 1)
            created = outcome.get("container")
            if created is not None:
                with contextlib.suppress(docker.errors.DockerException, *TRANSPORT):
                    self._remove_quietly(created.id)
            raise
        if "error" in outcome:
            raise outcome["error"]
        return outcome["container"]

    def inspect(self, container_id: str) -> ContainerInfo:
        with answering("inspecting a container"):
            attrs = self._client.api.inspect_container(container_id)
            state = attrs.get("State") or {}
            status = state.get("Status", "")
            restarts = int(attrs.get("RestartCount") or 0)
            stopped = status in {"exited", "dead", "restarting"}
            health = state.get("Health") or {}
            checks = health.get("Log") or []
            policy = (attrs.get("HostConfig") or {}).get("RestartPolicy") or {}
            return ContainerInfo(
                id=attrs["Id"],
                name=str(attrs.get("Name", "")).lstrip("/"),
                status=status,
                exit_code=state.get("ExitCode") if stopped else None,
                labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
                image=(attrs.get("Config") or {}).get("Image", ""),
                started_at=state.get("StartedAt", ""),
                restart_count=restarts,
                health=health.get("Status", ""),
                health_log=str(checks[-1].get("Output", "")).strip() if checks else "",
                restart_max=int(policy.get("MaximumRetryCount") or 0)
                if policy.get("Name") == "on-failure" else 0,
                finished_at="" if state.get("FinishedAt", "").startswith("0001-")
                else state.get("FinishedAt", ""),
                last_exit_code=state.get("ExitCode") if stopped
                else self._last_exit(attrs) if restarts else None,
                oom_killed=bool(state.get("OOMKilled")),
                error=str(state.get("Error") or ""),
                ports=published_ports(attrs),
            )

    def _last_exit(self, attrs: dict[str, Any]) -> int | None:
        """The exit code that made the policy restart a running container: Docker resets
        State.ExitCode on restart, so it comes from the daemon's recent `die` events (None when
        they are gone)."""
        api = self._client.api
        filters = json.dumps({"container": [attrs["Id"]], "event": ["die"]})
        created = dt.datetime.fromisoformat(str(attrs["Created"])[:26].rstrip("Z") + "+00:00")
        # `until` now: the daemon answers with what it has and closes, within the timeout.
        window = {"since": int(created.timestamp()), "until": f"{time.time():.6f}"}
        try:
            response = api._get(api._url("/events"), params={**window, "filters": filters})
            api._raise_for_status(response)
        except (docker.errors.APIError, *TRANSPORT):  # an older daemon, a skewed clock: unknown
            return None
        codes = [json.loads(line).get("Actor", {}).get("Attributes", {}).get("exitCode")
                 for line in response.text.splitlines() if line.strip()]
        known = [int(code) for code in codes if str(code).lstrip("-").isdigit()]
        return known[-1] if known else None

    def find(self, labels: dict[str, str]) -> list[ContainerInfo]:
        """Containers carrying all of `labels` (and opsctl's managed label), running or not."""
        wanted = {MANAGED: TRUE, **labels}
        filters = {"label": [f"{k}={v}" for k, v in wanted.items()]}
        with answering("listing containers"):
            found = self._client.containers.list(all=True, filters=filters)
            infos = []
            for container in found:
                with contextlib.suppress(docker.errors.NotFound):  # removed meanwhile
                    infos.append(self.inspect(container.id))
            return infos

    def logs(self, container_id: str, tail: int | str = "all") -> str:
        with answering("reading a log"):
            container = self._client.containers.get(container_id)
            return str(container.logs(tail=tail).decode(errors="replace"))

    def follow_logs(self, container_id: str, tail: int | str = 10) -> Iterator[str]:
        with answering("following a log"):
            container = self._client.containers.get(container_id)
            for chunk in container.logs(stream=True, follow=True, tail=tail):
                yield chunk.decode(errors="replace")

    def log_chunks(self, container_id: str) -> Iterator[bytes]:
        """The whole log with timestamps, frame by frame.

        The SDK's streamed logs switch the socket's timeout off; this reads the same endpoint
        with the client's timeout kept on every read, so a daemon that hangs in the middle of a
        long log fails the read instead of blocking opsctl. opsctl's containers have no TTY, so
        the stream is multiplexed: an 8-byte header (stream, length) before each payload.
        """
        api = self._client.api
        params = {"stdout": 1, "stderr": 1, "timestamps": 1, "follow": 0, "tail": "all"}
        with answering("reading a log"):
            response = api._get(api._url("/containers/{0}/logs", container_id), params=params,
                                stream=True)
            try:
                api._raise_for_status(response)
                while header := read_exactly(response.raw, LOG_FRAME_HEADER.size):
                    _, length = LOG_FRAME_HEADER.unpack(header)
                    yield read_exactly(response.raw, length)
            finally:
                response.close()

    def stop(self, container_id: str, grace_seconds: int) -> None:
        with answering("stopping a container"):
            try:
                container = self._client.containers.get(container_id)
                if container.status in {"running", "restarting", "paused"}:
                    container.stop(timeout=grace_seconds)
            except docker.errors.NotFound:
                return

    def remove(self, container_id: str) -> None:
        with answering("removing a container"):
            self._remove_quietly(container_id)

    def stop_and_remove(self, container_id: str, grace_seconds: int) -> None:
        self.stop(container_id, grace_seconds)
        self.remove(container_id)

    def exec(self, container_id: str, command: list[str], *, env: dict[str, str],
             timeout_seconds: float, max_output_bytes: int) -> ExecResult:
        return run_exec(self._client.api, container_id, command, env, timeout_seconds,
                        max_output_bytes)

    def archive(self, container_id: str, path: str, max_bytes: int) -> bytes | None:
        container = self._client.containers.get(container_id)
        try:
            stream, _ = container.get_archive(path)
        except docker.errors.NotFound:
            return None
        data = bytearray()
        for chunk in stream:
            data += chunk
            if len(data) > max_bytes:
                raise LaunchError(f"{path} in the container holds more than "
                                  f"{max_bytes >> 20} MiB", hint="capture fewer steps")
        return bytes(data)

    def _remove_quietly(self, container_id: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self._client.api.remove_container(container_id, force=True)

    # --- images ------------------------------------------------------------------------------

    def image_labels(self, ref: str) -> dict[str, str] | None:
        """The image's labels, or None when the engine does not have it."""
        with answering("inspecting an image"):
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
        return dockerimages.repo_digests(self._client, ref)

    def image_env(self, ref: str) -> dict[str, str] | None:
        return dockerimages.image_env(self._client, ref)

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
        return dockerimages.import_rootfs(self._client, tarball, f"{repository}:{tag}", changes)

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

    def push(self, image: str, target: str, on_event: Callable[[BuildEvent], None]) -> str:
        """Tag and push; see opsctl.engine.dockerimages."""
        return dockerimages.push(self._client, image, target, on_event)

    def run_to_completion(
        self, image: str, command: list[str], timeout_seconds: float = 120,
        mounts: tuple[Mount, ...] = (),
    ) -> tuple[int, str]:
        """Run a throwaway container (no network, no GPU) and return (exit code, output)."""
        # Named up front: a Ctrl-C while the daemon creates it leaves no id in hand, only the name.
        name = f"opsctl-verify-{secrets.token_hex(6)}"
        try:
            container = self._client.containers.create(
                image=image, command=command, network_disabled=True, detach=True, name=name,
                labels={MANAGED: TRUE, ROLE: ROLE_VERIFY}, mounts=docker_mounts(mounts),
            )
        except docker.errors.ImageNotFound:
            raise BuildError(f"image {image} vanished before verification", hint="rebuild") from None
        except BaseException:  # created after all, or not: either way nothing is left
            with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                self._remove_quietly(name)
            raise
        try:
            container.start()
            result = container.wait(timeout=max(1, int(timeout_seconds)))
            output = container.logs().decode(errors="replace")
            return int(result.get("StatusCode", 1)), output
        except requests.exceptions.RequestException:
            return 124, "verification container timed out"
        finally:
            self._remove_quietly(container.id)
