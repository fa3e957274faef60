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

The module holds the whole seam to the Docker SDK: the engine class, how a RunSpec becomes
`containers.create` arguments, Docker's refusals as LaunchErrors, a dying daemon as
DaemonUnreachable, the frames of a multiplexed log stream, a bounded `docker exec`, and how
images move in and out (`docker import` of a root filesystem; a push that reads the digest the
registry answered, never computed here; an image's repo digests and environment). Credentials:
the Docker SDK reads docker's own client configuration (~/.docker/config.json, its credential
store and helpers, as `docker login` left them) and hands them to the daemon; opsctl never takes
a password or token itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import secrets
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import requests
import urllib3.exceptions

from opsctl.core.errors import BuildError, ContainerGone, DaemonUnreachable, LaunchError
from opsctl.core.labels import MANAGED, ROLE, ROLE_VERIFY, RUN_ID, TRUE
from opsctl.engine.api import (
    DIGEST_PATTERN,
    BuildEvent,
    ContainerInfo,
    Engine,
    EngineInfo,
    ExecResult,
    Mount,
    PortBinding,
    RunSpec,
    image_missing,
    name_taken,
    port_taken,
)

LOG_FRAME_HEADER = struct.Struct(">BxxxL")  # stream (1 stdout, 2 stderr), payload length
# What a daemon that dies, hangs or breaks off an answer raises through the SDK.
TRANSPORT = (requests.exceptions.RequestException, urllib3.exceptions.HTTPError,
             ConnectionError, TimeoutError)
# Docker's own words for failures a user can cause, mapped to what to do about them.
PORT_TAKEN = re.compile(
    r"port is already allocated|address already in use|bind for .* failed", re.I
)
_NO_GPU_RUNTIME = re.compile(
    r"could not select device driver|nvidia-container-cli|unknown runtime", re.I
)
_NANOSECONDS = 1_000_000_000
_EXIT_CODE_WAIT_S = 5.0  # after its output ends, how long the daemon may take to record the exit


@contextlib.contextmanager
def answering(what: str) -> Iterator[None]:
    """Turn the daemon dying, hanging or failing (5xx) during `what` into DaemonUnreachable:
    one line, no chained traceback, worded as opsctl.core.failures words the same families.
    Docker's 4xx refusals pass through to the caller."""
    try:
        yield
    except docker.errors.APIError as exc:
        if exc.status_code is None or exc.status_code < 500:
            raise
        said = " ".join(str(exc.explanation or exc).split())[:200]
        raise DaemonUnreachable(
            f"the Docker engine failed mid-call ({exc.status_code}: {said}) while {what}",
            hint="check `docker info`; `opsctl status` shows what is left",
        ) from None
    except (*TRANSPORT, docker.errors.DockerException) as exc:
        said = " ".join(str(exc).split())[:200]
        raise DaemonUnreachable(
            f"the Docker engine stopped answering: {type(exc).__name__}: {said} (while {what})",
            hint="check `docker info` and DOCKER_HOST; `opsctl status` shows what is left",
        ) from None


def docker_mounts(mounts: Iterable[Mount]) -> list[docker.types.Mount]:
    return [docker.types.Mount(target=m.target, source=m.source, type=m.kind,
                               read_only=m.read_only) for m in mounts]


def create_kwargs(spec: RunSpec) -> dict[str, Any]:
    """`containers.create` arguments for `spec`."""
    mounts = docker_mounts(spec.mounts)
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
        **_healing_kwargs(spec),
    }


def _healing_kwargs(spec: RunSpec) -> dict[str, Any]:
    """The restart policy, health check and log rotation of `spec`, as the SDK takes them; the
    health check runs through /bin/sh exactly as `docker run --health-cmd` (the dry run) does."""
    kwargs: dict[str, Any] = {}
    if spec.restart_max is not None:
        kwargs["restart_policy"] = ({"Name": "on-failure", "MaximumRetryCount": spec.restart_max}
                                    if spec.restart_max else {"Name": "no"})
    if spec.healthcheck is not None:
        check = spec.healthcheck
        kwargs["healthcheck"] = docker.types.Healthcheck(
            test=["CMD-SHELL", check.command], interval=check.interval_seconds * _NANOSECONDS,
            timeout=check.timeout_seconds * _NANOSECONDS, retries=check.retries,
            start_period=check.start_period_seconds * _NANOSECONDS)
    if spec.log_rotation is not None:
        kwargs["log_config"] = docker.types.LogConfig(
            type="json-file", config={"max-size": spec.log_rotation.max_size,
                                      "max-file": str(spec.log_rotation.max_files)})
    return kwargs


def launch_error(exc: docker.errors.APIError, spec: RunSpec) -> LaunchError:
    """Docker refusing to create or start `spec`'s container, said so a user can act on it."""
    text = str(exc.explanation or exc)
    if PORT_TAKEN.search(text):
        return port_taken(spec)
    if _NO_GPU_RUNTIME.search(text):
        return LaunchError(
            f"the engine cannot give GPUs {spec.gpus} to a container: {text.splitlines()[0]}",
            hint="install the NVIDIA Container Toolkit and restart dockerd; "
            "opsctl never falls back to CPU",
        )
    if exc.status_code == 409:
        return name_taken(spec)
    return LaunchError(f"docker refused to start the container: {text.splitlines()[0]}",
                       hint="see the engine's message above")


def read_exactly(raw: Any, size: int) -> bytes:
    """`size` bytes of a response body; b"" at its clean end. A body cut inside a frame is the
    daemon breaking off: ConnectionError."""
    data = b""
    while len(data) < size:
        chunk = raw.read(size - len(data))
        if not chunk:
            if data:
                raise ConnectionError(f"the log stream ended inside a frame ({len(data)} of "
                                      f"{size} bytes)")
            return b""
        data += chunk
    return data


def published_ports(attrs: dict[str, Any]) -> tuple[PortBinding, ...]:
    """The host ports a container's inspect data says it publishes (configured bindings, so a
    stopped container still says which port it would take)."""
    bindings = (attrs.get("HostConfig") or {}).get("PortBindings") or {}
    return tuple(
        PortBinding(container_port=int(port.split("/")[0]), host_port=int(host["HostPort"]),
                    host_address=host.get("HostIp") or "0.0.0.0")
        for port, hosts in sorted(bindings.items()) for host in hosts or []
        if port.endswith("/tcp") and str(host.get("HostPort") or "").isdigit())


def run_exec(api: Any, container_id: str, command: list[str], env: dict[str, str],
             timeout_seconds: float, max_output_bytes: int) -> ExecResult:
    """`docker exec` bounded in time and memory (see `Engine.exec`).

    The SDK's exec stream waits for data without a deadline, so it is read in a daemon thread
    that keeps only the output's tail; at the deadline the stream is shut, which ends that read,
    and opsctl returns instead of waiting on a command that may never finish.
    """
    with answering("starting a command in a container"):
        try:
            exec_id = api.exec_create(container_id, command, environment=env or None,
                                      stdout=True, stderr=True, tty=False)["Id"]
            stream = api.exec_start(exec_id, stream=True)
        except docker.errors.APIError as exc:
            if exc.status_code is not None and exc.status_code >= 500:
                raise
            said = " ".join(str(exc.explanation or exc).split())[:200]
            raise LaunchError(f"cannot run {command[0]!r} in container {container_id[:12]}: {said}",
                              hint="is it still running? `opsctl status`") from None
    tail = bytearray()
    cut: list[bool] = []  # non-empty once output was dropped
    failed: list[BaseException] = []

    def pump() -> None:
        try:
            for chunk in stream:
                tail.extend(chunk)
                if len(tail) > max_output_bytes:
                    del tail[:len(tail) - max_output_bytes]
                    cut.append(True)
        except (*TRANSPORT, OSError, docker.errors.DockerException) as exc:
            failed.append(exc)

    reader = threading.Thread(target=pump, name="opsctl-exec", daemon=True)
    reader.start()
    try:
        reader.join(max(0.0, timeout_seconds))
    finally:  # the deadline, or Ctrl-C: stop reading; the command is left to its own end
        timed_out = reader.is_alive()
        if timed_out:
            with contextlib.suppress(*TRANSPORT, OSError, docker.errors.DockerException):
                stream.close()
            reader.join(1.0)
    if timed_out:
        return ExecResult(exit_code=None, output=bytes(tail), truncated=bool(cut), timed_out=True)
    if failed:
        with answering("reading a command's output"):
            raise failed[0]
    return ExecResult(exit_code=_exit_code(api, exec_id), output=bytes(tail), truncated=bool(cut))


def _exit_code(api: Any, exec_id: str) -> int | None:
    """The finished command's exit code; the daemon records it just after the output ends."""
    deadline = time.monotonic() + _EXIT_CODE_WAIT_S
    with answering("reading a command's exit code"):
        while True:
            state = api.exec_inspect(exec_id)
            if not state.get("Running") or time.monotonic() > deadline:
                code = state.get("ExitCode")
                return None if state.get("Running") or code is None else int(code)
            time.sleep(0.05)


# --- images: import, push, config -------------------------------------------------------------

# The longest silence allowed between two messages of a push: a registry may take minutes to
# commit a large layer after its upload, longer than the client's usual per-call timeout.
PUSH_STALL_SECONDS = 600
_STATUS_DIGEST = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")
_UNREACHABLE = re.compile(r"connection refused|no such host|i/o timeout|dial tcp|"
                          r"server gave HTTP response to HTTPS client|certificate", re.I)
_DENIED = re.compile(r"unauthorized|denied|authentication required|no basic auth", re.I)


def repo_digests(client: docker.DockerClient, ref: str) -> list[str]:
    try:
        return list(client.images.get(ref).attrs.get("RepoDigests") or [])
    except docker.errors.ImageNotFound:
        return []


def image_env(client: docker.DockerClient, ref: str) -> dict[str, str] | None:
    """The image's configured environment (Config.Env, `NAME=value` each); None when absent."""
    with answering("inspecting an image"):
        try:
            attrs = client.images.get(ref).attrs
        except docker.errors.ImageNotFound:
            return None
    pairs = [str(item).partition("=") for item in (attrs.get("Config") or {}).get("Env") or []]
    return {name: value for name, _, value in pairs if name}


def import_rootfs(client: docker.DockerClient, tarball: Path, ref: str, changes: list[str]) -> str:
    """`docker import` a root filesystem tarball as `ref` (repository:tag); returns the image id."""
    repository, tag = split_target(ref)
    try:
        client.api.import_image(src=str(tarball), repository=repository, tag=tag, changes=changes)
    except docker.errors.APIError as exc:
        raise BuildError(
            f"the engine refused to import {ref}: {str(exc.explanation or exc).splitlines()[0]}",
            hint="check the engine's log (journalctl -u docker) and free disk space",
        ) from None
    try:
        return str(client.images.get(ref).id)
    except docker.errors.ImageNotFound:
        raise BuildError(f"import of {ref} reported no image", hint="retry with --force") from None


def split_target(target: str) -> tuple[str, str]:
    """REGISTRY/REPO:TAG as (REGISTRY/REPO, TAG); the tag is after the last colon of the last
    path component (a registry's port has its colon before a slash)."""
    repository, _, tag = target.rpartition(":")
    if not repository or "/" in tag:
        raise ValueError(f"{target} names no tag")
    return repository, tag


def push(client: docker.DockerClient, image: str, target: str,
         on_event: Callable[[BuildEvent], None]) -> str:
    """Tag `image` (a tag or an image id) as `target` and push it; returns the registry's digest."""
    repository, tag = split_target(target)
    with answering(f"tagging {target}"):
        try:
            client.api.tag(image, repository, tag)
        except docker.errors.ImageNotFound:
            raise image_missing(image) from None
    api = client.api
    usual_timeout = api.timeout
    api.timeout = PUSH_STALL_SECONDS
    try:
        with answering(f"pushing {target}"):
            try:
                stream = api.push(repository, tag=tag, stream=True, decode=True)
                return _follow(stream, target, on_event)
            except docker.errors.APIError as exc:
                if exc.status_code is not None and exc.status_code >= 500:
                    raise
                raise push_error(target, str(exc.explanation or exc)) from None
    except BaseException:
        _untag(client, target)  # a failed push leaves no tag of a registry behind
        raise
    finally:
        api.timeout = usual_timeout


def _untag(client: docker.DockerClient, target: str) -> None:
    """Remove the tag `target` only (the image keeps its other tags and stays)."""
    with contextlib.suppress(docker.errors.DockerException, *TRANSPORT):
        client.api.remove_image(target, force=False, noprune=True)


def _follow(stream: Any, target: str, on_event: Callable[[BuildEvent], None]) -> str:
    digest = ""
    for chunk in stream:
        if chunk.get("error") or chunk.get("errorDetail"):
            detail = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error")
            raise push_error(target, str(detail))
        aux = chunk.get("aux") or {}
        if DIGEST_PATTERN.fullmatch(str(aux.get("Digest", ""))):
            digest = str(aux["Digest"])
        status = str(chunk.get("status") or "")
        found = _STATUS_DIGEST.search(status)
        if found and not digest:
            digest = found.group(1)
        if status:
            layer = f"{chunk['id']}: " if chunk.get("id") else ""
            on_event(BuildEvent(text=f"{layer}{status} {chunk.get('progress') or ''}".rstrip(),
                                step="push"))
    if not digest:
        raise BuildError(f"the push of {target} ended without the registry's digest",
                         hint="push again; `docker push` shows the registry's whole answer")
    return digest


def push_error(target: str, detail: str) -> BuildError:
    """The daemon's or registry's refusal as one line, with what to do about it."""
    said = " ".join(detail.split())[:240]
    registry = target.split("/", 1)[0]
    if _DENIED.search(said):
        hint = (f"log in with `docker login {registry}` (opsctl uses docker's own credential "
                "store and never takes a password itself), and check the repository's push rights")
    elif _UNREACHABLE.search(said):
        hint = (f"check that {registry} is up and reachable from the Docker daemon; a registry "
                "without TLS must be listed in dockerd's insecure-registries (127.0.0.0/8 is by "
                "default)")
    else:
        hint = "see the registry's message; `docker push` shows its whole answer"
    return BuildError(f"push of {target} failed: {said}", hint=hint)


# --- the engine --------------------------------------------------------------------------------

DAEMON_TIMEOUT_SECONDS = 10
# How long a Ctrl-C during `Thread.start` waits to learn whether the create thread runs.
THREAD_START_SECONDS = 5.0
# How long the clean-up of a cut-off throwaway create keeps looking for a container the daemon
# creates late, and how often (`DockerEngine._remove_late_create`).
LATE_CREATE_SECONDS = 3.0
LATE_CREATE_POLL_SECONDS = 0.25
# The engine's answers for a container that is gone (404) or being removed (409): a removal a
# Ctrl-C cut short goes on in the daemon. How long opsctl waits for such a removal to finish.
CONFLICT = 409
GONE_STATUSES = frozenset({404, CONFLICT})
REMOVAL_WAIT_SECONDS = 10.0
REMOVAL_POLL_SECONDS = 0.2


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


def _cut_off(error: BaseException) -> bool:
    """A create whose answer was lost on the way (a transport error), not one the daemon refused
    (an APIError, itself a requests error) nor a bug before anything was sent."""
    return isinstance(error, TRANSPORT) and not isinstance(error, docker.errors.APIError)


_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:\d\d) ")


def joined_piece(stream: int, payload: bytes, unfinished: set[int]) -> bytes:
    """One frame of a timestamped log, its stamp dropped when it goes on its stream's
    unfinished line (`unfinished` is updated)."""
    if stream in unfinished and (stamp := _STAMP.match(payload)):
        payload = payload[stamp.end():]
    if payload.endswith(b"\n"):
        unfinished.discard(stream)
    else:
        unfinished.add(stream)
    return payload


def _container_info(attrs: dict[str, Any],
                    last_exit: Callable[[dict[str, Any]], int | None]) -> ContainerInfo:
    """ContainerInfo from an inspect answer; `last_exit` finds the exit code that made the
    policy restart a running container."""
    state = attrs.get("State") or {}
    status = state.get("Status", "")
    restarts = int(attrs.get("RestartCount") or 0)
    stopped = status in {"exited", "dead", "restarting"}
    config = attrs.get("Config") or {}
    last_exit_code = state.get("ExitCode") if stopped else None
    if not stopped and restarts:
        last_exit_code = last_exit(attrs)
    return ContainerInfo(
        id=attrs["Id"],
        name=str(attrs.get("Name", "")).lstrip("/"),
        status=status,
        exit_code=state.get("ExitCode") if stopped else None,
        labels=dict(config.get("Labels") or {}),
        image=config.get("Image", ""),
        started_at=state.get("StartedAt", ""),
        restart_count=restarts,
        **_health(state),
        restart_max=_restart_max(attrs),
        finished_at=_finished_at(state),
        last_exit_code=last_exit_code,
        oom_killed=bool(state.get("OOMKilled")),
        error=str(state.get("Error") or ""),
        ports=published_ports(attrs),
    )


def _health(state: dict[str, Any]) -> dict[str, str]:
    """The health check's status and its last check's output."""
    health = state.get("Health") or {}
    checks = health.get("Log") or []
    last = str(checks[-1].get("Output", "")).strip() if checks else ""
    return {"health": health.get("Status", ""), "health_log": last}


def _restart_max(attrs: dict[str, Any]) -> int:
    """The on-failure policy's retry limit; 0 for any other policy."""
    policy = (attrs.get("HostConfig") or {}).get("RestartPolicy") or {}
    if policy.get("Name") != "on-failure":
        return 0
    return int(policy.get("MaximumRetryCount") or 0)


def _finished_at(state: dict[str, Any]) -> str:
    """When the container last stopped; empty for Docker's zero time (never stopped)."""
    finished = state.get("FinishedAt", "")
    return "" if finished.startswith("0001-") else finished


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
        began, done = threading.Event(), threading.Event()

        def work() -> None:
            began.set()
            try:
                outcome["container"] = self._client.containers.create(**kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                outcome["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=work, name="opsctl-create", daemon=True)
        # An Event, not Thread.join: before Python 3.13 a join interrupted by Ctrl-C marks the
        # live thread as stopped (threading's bpo-45274 handling), so a second join returned at
        # once and the container the daemon then created was left in state Created. `start` is
        # inside the try: it waits for the new thread, and a Ctrl-C there (CI's gate module) left
        # the create running with nobody to remove what it made.
        try:
            worker.start()
            done.wait()
        except BaseException:
            if began.wait(THREAD_START_SECONDS):  # the create was sent, or is about to be
                done.wait(self._client.api.timeout + 1)
                self._undo_create(kwargs, outcome)
            raise
        if "error" in outcome:
            if _cut_off(outcome["error"]):
                self._undo_create(kwargs, outcome)
            raise outcome["error"]
        return outcome["container"]

    def _undo_create(self, kwargs: dict[str, Any], outcome: dict[str, Any]) -> None:
        """Remove what a create cut short made: the container in hand, or else (no answer yet,
        or a transport error: the daemon may still make it) a bounded late look by this run's
        id. Never by name alone: a container of that name may be another run's or the user's
        (the refused create's 409 is then what was lost)."""
        created = outcome.get("container")
        run_id = (kwargs.get("labels") or {}).get(RUN_ID)
        with contextlib.suppress(docker.errors.DockerException, *TRANSPORT):
            if created is not None:
                self._remove_quietly(created.id)
            elif run_id and ("error" not in outcome or _cut_off(outcome["error"])):
                self._remove_late_create([f"{RUN_ID}={run_id}"])

    def inspect(self, container_id: str) -> ContainerInfo:
        with answering("inspecting a container"):
            try:
                attrs = self._client.api.inspect_container(container_id)
            except docker.errors.NotFound:
                raise ContainerGone(f"container {container_id[:12]} is gone",
                                    hint="`opsctl status` shows what runs") from None
            return _container_info(attrs, self._last_exit)

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
            # The low-level list: the SDK's `containers.list` inspects each one itself and
            # raises NotFound for one removed between its list and its inspect.
            found = self._client.api.containers(all=True, filters=filters)
            infos = []
            for container in found:
                with contextlib.suppress(ContainerGone):  # removed meanwhile
                    infos.append(self.inspect(container["Id"]))
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
        """The whole log with timestamps, frame by frame, each line whole: Docker splits a line
        longer than 16 KiB into pieces and stamps each piece, so a secret across a cut read
        `...KEY12<timestamp> 3...` and no mask found it; a piece that goes on its stream's
        unfinished line loses its stamp.

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
                try:
                    api._raise_for_status(response)
                except docker.errors.APIError as exc:
                    if exc.status_code not in GONE_STATUSES:
                        raise
                    # Gone, or being removed (a removal a Ctrl-C cut short goes on in the
                    # daemon): no log to read; the saved file says so instead.
                    said = " ".join(str(exc.explanation or exc).split())[:200]
                    note = f"[opsctl: no log: the engine answered {exc.status_code}: {said}]\n"
                    yield note.encode()
                    return
                unfinished: set[int] = set()  # streams whose last piece ended mid-line
                while header := read_exactly(response.raw, LOG_FRAME_HEADER.size):
                    stream, length = LOG_FRAME_HEADER.unpack(header)
                    yield joined_piece(stream, read_exactly(response.raw, length), unfinished)
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
            try:
                self._remove_quietly(container_id)
            except docker.errors.APIError as exc:
                if exc.status_code != CONFLICT:
                    raise
                raise LaunchError(f"the engine is still removing container {container_id[:12]} "
                                  f"after {REMOVAL_WAIT_SECONDS:.0f} s",
                                  hint="`opsctl status` shows what is left") from None

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

    def _remove_late_create(self, label_filters: list[str]) -> None:
        """Remove the container a cut-off create may have made, found by this run's own labels
        (never by name: that may be another's). The daemon can finish creating it after a first
        look (CI found one in state Created): look for `LATE_CREATE_SECONDS`, never wider."""
        deadline = time.monotonic() + LATE_CREATE_SECONDS
        while True:
            found = self._client.api.containers(all=True, filters={"label": label_filters})
            for container in found:
                self._remove_quietly(container["Id"])
            if found or time.monotonic() >= deadline:
                return
            time.sleep(LATE_CREATE_POLL_SECONDS)

    def _remove_quietly(self, container_id: str) -> None:
        """Remove it, whatever state it is in; done when it is gone, including a removal already
        under way (409: one a Ctrl-C cut short, which the daemon finishes) that ends within
        `REMOVAL_WAIT_SECONDS`."""
        try:
            self._client.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code != CONFLICT:
                raise
            deadline = time.monotonic() + REMOVAL_WAIT_SECONDS
            while time.monotonic() < deadline:
                try:
                    self._client.api.inspect_container(container_id)
                except docker.errors.NotFound:
                    return
                time.sleep(REMOVAL_POLL_SECONDS)
            raise

    def info(self) -> EngineInfo:
        """`docker version` and `docker info`, as opsctl reads them."""
        with answering("reading the engine's version and info"):
            version = self._client.version()
            info = self._client.info()
        runtimes = info.get("Runtimes") or {}
        return EngineInfo(version=str(version.get("Version", "?")),
                          api_version=str(version.get("ApiVersion", "?")),
                          runtimes=tuple(sorted(runtimes)) if isinstance(runtimes, dict) else (),
                          default_runtime=str(info.get("DefaultRuntime") or ""),
                          cdi_spec_dirs=tuple(str(d) for d in info.get("CDISpecDirs") or ()),
                          root_dir=str(info.get("DockerRootDir") or ""))

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
        return repo_digests(self._client, ref)

    def image_env(self, ref: str) -> dict[str, str] | None:
        return image_env(self._client, ref)

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

    def tag_image(self, image_id: str, ref: str) -> None:
        repository, _, tag = ref.rpartition(":")
        if not repository or "/" in tag:  # no tag: docker's default
            repository, tag = ref, "latest"
        try:
            self._client.images.get(image_id).tag(repository, tag)
        except docker.errors.ImageNotFound:
            raise BuildError(f"image {image_id[:19]} vanished before it could be tagged {ref}",
                             hint="rebuild") from None

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
        return import_rootfs(self._client, tarball, f"{repository}:{tag}", changes)

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
                        f"build failed at {last_step or 'the first step'}: "
                        f"{detail.splitlines()[-1]}",
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
        """Tag and push; see opsctl.engine."""
        return push(self._client, image, target, on_event)

    def run_to_completion(
        self, image: str, command: list[str], timeout_seconds: float = 120,
        mounts: tuple[Mount, ...] = (), gpus: bool = False,
    ) -> tuple[int, str]:
        """Run a throwaway container (no network; no GPU unless `gpus`) and return (exit code,
        output); with `gpus`, the engine's refusal to give GPUs is (125, its words)."""
        # Named and labelled up front with this run's own token: a Ctrl-C while the daemon
        # creates it leaves no id in hand, only the name and the label.
        token = secrets.token_hex(6)
        name = f"opsctl-verify-{token}"
        # `docker run --gpus all`: every GPU through the engine's NVIDIA device driver.
        requests_all = (
            [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else None
        )
        try:
            container = self._client.containers.create(
                image=image, command=command, network_disabled=True, detach=True, name=name,
                labels={MANAGED: TRUE, ROLE: ROLE_VERIFY, RUN_ID: token},
                mounts=docker_mounts(mounts),
                device_requests=requests_all,
            )
        except docker.errors.ImageNotFound:
            raise BuildError(
                f"image {image} vanished before verification", hint="rebuild"
            ) from None
        except docker.errors.APIError:  # the daemon answered: one look by name is enough
            with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                self._remove_quietly(name)
            raise
        except BaseException:  # cut off (Ctrl-C, a transport error): the create may land later
            with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                try:  # by name first: this run's own random one
                    self._client.api.remove_container(name, force=True)
                except docker.errors.NotFound:
                    self._remove_late_create([f"{ROLE}={ROLE_VERIFY}", f"{RUN_ID}={token}"])
            raise
        try:
            try:
                container.start()
            except docker.errors.APIError as exc:
                if not gpus:
                    raise
                # No NVIDIA runtime/CDI: `could not select device driver "" with capabilities`.
                return 125, " ".join(str(exc.explanation or exc).split())[:300]
            result = container.wait(timeout=max(1, int(timeout_seconds)))
            output = container.logs().decode(errors="replace")
            return int(result.get("StatusCode", 1)), output
        except requests.exceptions.RequestException:
            return 124, "verification container timed out"
        finally:
            self._remove_quietly(container.id)
