"""How `opsctl.engine.dockerpy` speaks to the Docker SDK: a RunSpec as `containers.create`
arguments, Docker's refusals as LaunchErrors, a dying daemon as DaemonUnreachable, the frames of
a multiplexed log stream, published ports, and a bounded `docker exec`.

Kept apart from the engine class so each stays small; like dockerpy, nothing outside
opsctl/engine/ imports it.
"""

from __future__ import annotations

import contextlib
import re
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import docker
import docker.errors
import docker.types
import requests
import urllib3.exceptions

from opsctl.core.errors import DaemonUnreachable, LaunchError
from opsctl.engine.api import ExecResult, Mount, PortBinding, RunSpec, name_taken, port_taken

LOG_FRAME_HEADER = struct.Struct(">BxxxL")  # stream (1 stdout, 2 stderr), payload length
# What a daemon that dies, hangs or breaks off an answer raises through the SDK.
TRANSPORT = (requests.exceptions.RequestException, urllib3.exceptions.HTTPError,
             ConnectionError, TimeoutError)
# Docker's own words for failures a user can cause, mapped to what to do about them.
PORT_TAKEN = re.compile(r"port is already allocated|address already in use|bind for .* failed", re.I)
_NO_GPU_RUNTIME = re.compile(r"could not select device driver|nvidia-container-cli|unknown runtime", re.I)
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
        raise DaemonUnreachable(f"the Docker engine failed mid-call ({exc.status_code}: {said}) "
                                f"while {what}",
                                hint="check `docker info`; `opsctl status` shows what is left") from None
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
            docker.types.DeviceRequest(device_ids=[str(g) for g in spec.gpus], capabilities=[["gpu"]])
        )
    ulimits = [
        docker.types.Ulimit(name=name, soft=soft, hard=hard) for name, (soft, hard) in spec.ulimits.items()
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
