"""In-memory stand-ins for opsctl's collaborators, shared by the unit tests of every room.

- `FakeEngine` implements `opsctl.engine.api.Engine`: containers with a state, an exit code and a
  log; images with labels; `exec` answered by a test's handler; and programmable failures (a port
  taken, any method raising once, a container that exits by itself while loading). It raises the
  same errors as the real engine.
- `fake_nvidia_smi` writes a sample `nvidia-smi` that prints the driver version a test sets.
- `FakeClock` implements `opsctl.core.clock.Clock`: sleeping advances it, so no test waits.
- `FakeSglang` answers the readiness endpoints of an sglang server through httpx.MockTransport.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from opsctl.core.errors import BuildError, ContainerGone, LaunchError
from opsctl.core.labels import MANAGED, TRUE
from opsctl.engine.api import (
    BuildEvent,
    ContainerInfo,
    EngineInfo,
    ExecResult,
    Mount,
    PortBinding,
    RunSpec,
    image_missing,
    name_taken,
    port_taken,
)

STARTED_AT = "2026-11-29T10:00:00.000000000Z"
# Docker's refusal of `--gpus` without the NVIDIA runtime (moby daemon/devices.go's wording).
NO_GPU_DRIVER = 'could not select device driver "" with capabilities: [[gpu]]'


def preflight_report(*results: tuple[str, bool, str]) -> str:
    """Output of opsctl's preflight probe with these (check, ok, detail) rows."""
    rows = [{"check": check, "ok": ok, "detail": detail} for check, ok, detail in results]
    return json.dumps({"ok": all(r["ok"] for r in rows), "results": rows})


PREFLIGHT_PASS = (0, preflight_report(("config.json", True, "stand-in: a fake engine's pass")))


@dataclass
class Behaviour:
    """What the next container started by `run` does by itself."""

    exit_after_inspects: int | None = None  # exits on that inspect (1 = the first)
    exit_code: int = 0
    log: list[str] = field(default_factory=list)
    # On that inspect the engine's restart policy has restarted it once (exit_code was the
    # run's), as Docker does between two polls: running again, RestartCount 1.
    restart_after_inspects: int | None = None
    # Raised by `run` once the container exists: the engine created it, but the answer never
    # reached opsctl (a Ctrl-C or a dropped connection while the daemon was creating).
    fail_after_create: BaseException | None = None


@dataclass
class FakeContainer:
    id: str
    name: str
    image: str
    labels: dict[str, str]
    host_ports: list[int]
    status: str = "running"
    ports: list[PortBinding] = field(default_factory=list)
    exit_code: int | None = None
    log: list[str] = field(default_factory=list)
    exit_after_inspects: int | None = None
    exit_code_later: int = 0
    restart_after_inspects: int | None = None
    restart_count: int = 0
    restart_max: int = 0
    last_exit_code: int | None = None
    health: str = ""
    health_log: str = ""
    oom_killed: bool = False

    def info(self) -> ContainerInfo:
        return ContainerInfo(
            id=self.id,
            name=self.name,
            status=self.status,
            exit_code=self.exit_code,
            labels=dict(self.labels),
            image=self.image,
            started_at=STARTED_AT if self.status == "running" else "",
            restart_count=self.restart_count,
            health=self.health,
            health_log=self.health_log,
            restart_max=self.restart_max,
            last_exit_code=self.last_exit_code,
            oom_killed=self.oom_killed,
            ports=tuple(self.ports),
        )


@dataclass
class FakeImage:
    id: str
    labels: dict[str, str]
    repo_digests: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # its config's environment


class FakeEngine:
    def __init__(self, images: dict[str, dict[str, str]] | None = None) -> None:
        self.images: dict[str, FakeImage] = {}
        self.containers: dict[str, FakeContainer] = {}
        self.ports_in_use: set[int] = set()  # held by something that is not a container
        self.failures: dict[str, BaseException] = {}  # method name -> raised on its next call
        self.failing_times: dict[str, int] = {}  # method name -> calls left that raise
        # Called at the start of every method (name, engine): a test's hook to act mid-run.
        self.on_call: Callable[[str, FakeEngine], None] = lambda method, engine: None
        self.next_run = Behaviour()
        self.registry: dict[str, str] = {}  # what pull_image finds: ref -> repo digest
        self.push_digests: dict[str, str] = {}  # what a push of that REGISTRY/REPO:TAG answers
        self.pushed: list[str] = []  # every target pushed, in order
        self.completion: tuple[int, str] = (0, "")  # what run_to_completion returns
        # What `up`'s preflight finds (a run_to_completion of opsctl's preflight probe): a pass
        # by default, as a healthy image with a loadable checkpoint answers it.
        self.preflight_answer: tuple[int, str] = PREFLIGHT_PASS
        # image, command, mounts
        self.preflights: list[tuple[str, list[str], tuple[Mount, ...]]] = []
        # What a throwaway container given every GPU answers (`run_to_completion(gpus=True)`):
        # by default the engine's refusal on a host without the NVIDIA runtime or CDI, Docker's
        # own wording; every such run is kept in `gpu_runs` as (image, command, timeout seconds).
        self.gpu_answer: tuple[int, str] = (125, NO_GPU_DRIVER)
        self.gpu_runs: list[tuple[str, list[str], float]] = []
        # What `info` answers (`docker version` + `docker info`): SAMPLE values, no real engine's.
        self.engine_info = EngineInfo(version="0.0.0-fake", api_version="1.41",
                                      runtimes=("runc",), default_runtime="runc",
                                      root_dir="/var/lib/docker")
        self.calls: list[str] = []
        self.archives: dict[tuple[str, str], bytes] = {}  # what `archive` finds
        # What `exec` answers for (container id, command, env); every call is kept in `execs`
        # as (container id, command, env, timeout seconds).
        self.exec_handler: Callable[[str, list[str], dict[str, str]], ExecResult] = (
            lambda container_id, command, env: ExecResult(exit_code=0, output=b""))
        self.execs: list[tuple[str, list[str], dict[str, str], float]] = []
        self.stopped: list[tuple[str, int]] = []  # (container name, grace seconds)
        self.removed: list[str] = []  # container names, in order
        self.specs: list[RunSpec] = []  # every spec `run` was given
        self._ids = itertools.count(1)
        for ref, labels in (images or {}).items():
            self.add_image(ref, labels)

    # --- set-up ---

    def add_image(self, ref: str, labels: dict[str, str] | None = None) -> str:
        image_id = f"sha256:{next(self._ids):064x}"
        self.images[ref] = FakeImage(id=image_id, labels=dict(labels or {}))
        return image_id

    def add_container(self, name: str, labels: dict[str, str], status: str = "running",
                      exit_code: int | None = None, log: Sequence[str] = (),
                      **state: object) -> FakeContainer:
        """A container that was there before the test (ours if `labels` carry opsctl.managed);
        `state` sets other FakeContainer fields (restart_count, health, ...)."""
        container = FakeContainer(
            id=f"c{next(self._ids)}",
            name=name,
            image="img",
            labels=dict(labels),
            host_ports=[],
            status=status,
            exit_code=exit_code,
            log=list(log),
        )
        for key, value in state.items():
            setattr(container, key, value)
        self.containers[container.id] = container
        return container

    def fail(self, method: str, error: BaseException, times: int = 1) -> None:
        """The next `times` calls of `method` raise `error` (a daemon error, a Ctrl-C...)."""
        self.failures[method] = error
        self.failing_times[method] = times

    def by_name(self, name: str) -> FakeContainer | None:
        return next((c for c in self.containers.values() if c.name == name), None)

    def _enter(self, method: str) -> None:
        self.calls.append(method)
        self.on_call(method, self)
        error = self.failures.get(method)
        if error is not None:
            self.failing_times[method] = self.failing_times.get(method, 1) - 1
            if self.failing_times[method] <= 0:
                del self.failures[method]
            raise error

    # --- containers ---

    def run(self, spec: RunSpec) -> ContainerInfo:
        self._enter("run")
        self.specs.append(spec)
        if spec.image not in self.images:
            raise image_missing(spec.image)
        taken = self.ports_in_use | {p for c in self.containers.values() for p in c.host_ports}
        if any(port.host_port in taken for port in spec.ports):
            raise port_taken(spec)
        if self.by_name(spec.name) is not None:
            raise name_taken(spec)
        behaviour, self.next_run = self.next_run, Behaviour()
        container = FakeContainer(
            id=f"c{next(self._ids)}",
            name=spec.name,
            image=spec.image,
            labels=dict(spec.labels),
            host_ports=[p.host_port for p in spec.ports],
            ports=list(spec.ports),
            log=list(behaviour.log),
            exit_after_inspects=behaviour.exit_after_inspects,
            exit_code_later=behaviour.exit_code,
            restart_after_inspects=behaviour.restart_after_inspects,
            restart_max=spec.restart_max or 0,
        )
        self.containers[container.id] = container
        if behaviour.fail_after_create is not None:
            raise behaviour.fail_after_create
        return container.info()

    def inspect(self, container_id: str) -> ContainerInfo:
        self._enter("inspect")
        container = self.containers.get(container_id)
        if container is None:
            raise ContainerGone(f"container {container_id[:12]} is gone")
        if container.status == "running" and container.exit_after_inspects is not None:
            container.exit_after_inspects -= 1
            if container.exit_after_inspects <= 0:
                container.status, container.exit_code = "exited", container.exit_code_later
        if container.restart_after_inspects is not None:
            container.restart_after_inspects -= 1
            if container.restart_after_inspects <= 0:
                container.restart_after_inspects = None
                container.restart_count += 1
                container.last_exit_code = container.exit_code_later
        return container.info()

    def find(self, labels: dict[str, str]) -> list[ContainerInfo]:
        self._enter("find")
        wanted = {MANAGED: TRUE, **labels}
        return [c.info() for c in self.containers.values()
                if all(c.labels.get(k) == v for k, v in wanted.items())]

    def logs(self, container_id: str, tail: int | str = "all") -> str:
        self._enter("logs")
        lines = self.containers[container_id].log
        kept = lines if tail == "all" else lines[-int(tail):]
        return "".join(line + "\n" for line in kept)

    def archive(self, container_id: str, path: str, max_bytes: int) -> bytes | None:
        """The tar bytes a test put in `archives[(container id, path)]`, else None."""
        self._enter("archive")
        return self.archives.get((container_id, path))

    def exec(self, container_id: str, command: list[str], *, env: dict[str, str],
             timeout_seconds: float, max_output_bytes: int) -> ExecResult:
        """The handler's answer, its output cut to the last `max_output_bytes` as Docker's is."""
        self._enter("exec")
        container = self.containers.get(container_id)
        if container is None or container.status != "running":
            raise LaunchError(f"cannot run {command[0]!r} in container {container_id[:12]}: "
                              "not running", hint="is it still running? `opsctl status`")
        self.execs.append((container_id, list(command), dict(env), timeout_seconds))
        result = self.exec_handler(container_id, list(command), dict(env))
        if len(result.output) > max_output_bytes:
            return replace(result, output=result.output[len(result.output) - max_output_bytes:],
                           truncated=True)
        return result

    def follow_logs(self, container_id: str, tail: int | str = 10) -> Iterator[str]:
        self._enter("follow_logs")
        yield self.logs(container_id, tail)

    def log_chunks(self, container_id: str) -> Iterator[bytes]:
        """The log a line per chunk, each line prefixed with a fixed timestamp, as Docker does."""
        self._enter("log_chunks")
        for line in list(self.containers[container_id].log):
            yield f"{STARTED_AT} {line}\n".encode()

    def stop(self, container_id: str, grace_seconds: int) -> None:
        self._enter("stop")
        container = self.containers.get(container_id)
        if container is not None and container.status in {"running", "restarting"}:
            container.status, container.exit_code = "exited", 0
            self.stopped.append((container.name, grace_seconds))

    def remove(self, container_id: str) -> None:
        self._enter("remove")
        container = self.containers.pop(container_id, None)
        if container is not None:
            self.removed.append(container.name)

    def stop_and_remove(self, container_id: str, grace_seconds: int) -> None:
        self._enter("stop_and_remove")
        container = self.containers.pop(container_id, None)
        if container is not None:
            self.stopped.append((container.name, grace_seconds))
            self.removed.append(container.name)

    def run_to_completion(self, image: str, command: list[str], timeout_seconds: float = 120,
                          mounts: tuple[Mount, ...] = (), gpus: bool = False) -> tuple[int, str]:
        self._enter("run_to_completion")
        if image not in self.images and not any(i.id == image for i in self.images.values()):
            raise BuildError(f"image {image} vanished before verification", hint="rebuild")
        if gpus:
            self.gpu_runs.append((image, list(command), timeout_seconds))
            return self.gpu_answer
        if command[-1:] and '"model_dir"' in command[-1]:  # the preflight probe's request
            self.preflights.append((image, list(command), tuple(mounts)))
            return self.preflight_answer
        return self.completion

    def info(self) -> EngineInfo:
        self._enter("info")
        return self.engine_info

    # --- images ---

    def image_labels(self, ref: str) -> dict[str, str] | None:
        self._enter("image_labels")
        image = self.images.get(ref)
        return None if image is None else dict(image.labels)

    def image_id(self, ref: str) -> str | None:
        self._enter("image_id")
        image = self.images.get(ref)
        return None if image is None else image.id

    def image_repo_digests(self, ref: str) -> list[str]:
        self._enter("image_repo_digests")
        image = self.images.get(ref)
        return [] if image is None else list(image.repo_digests)

    def image_env(self, ref: str) -> dict[str, str] | None:
        self._enter("image_env")
        image = self.images.get(ref)
        return None if image is None else dict(image.env)

    def pull_image(self, ref: str) -> list[str]:
        self._enter("pull_image")
        if ref not in self.registry:
            raise LaunchError(f"cannot pull {ref}: not found", hint="check the registry")
        self.add_image(ref)
        self.images[ref].repo_digests = [f"{ref.split(':')[0]}@{self.registry[ref]}"]
        return self.images[ref].repo_digests

    def remove_image(self, ref: str) -> None:
        self._enter("remove_image")
        self.images.pop(ref, None)

    def remove_image_if_unused(self, image_id: str) -> bool:
        self._enter("remove_image_if_unused")
        tagged = [ref for ref, image in self.images.items() if image.id == image_id]
        return not tagged

    def tag_image(self, image_id: str, ref: str) -> None:
        self._enter("tag_image")
        found = next((i for i in self.images.values() if i.id == image_id), None)
        if found is None:
            raise image_missing(image_id)
        self.images[ref] = found

    def import_rootfs(self, tarball: Path, repository: str, tag: str, changes: list[str]) -> str:
        self._enter("import_rootfs")
        return self.add_image(f"{repository}:{tag}")

    def build(self, context_dir: Path, dockerfile: str, tag: str, build_args: dict[str, str],
              labels: dict[str, str], on_event: Callable[[BuildEvent], None]) -> str:
        self._enter("build")
        on_event(BuildEvent(text=f"Step 1/1 : FROM scratch ({dockerfile})", step="Step 1/1"))
        return self.add_image(tag, labels)

    def push(self, image: str, target: str, on_event: Callable[[BuildEvent], None]) -> str:
        """Tags `image` as `target` and answers the digest a test put in `push_digests[target]`
        (a registry's answer); without one the push fails as an unreachable registry does."""
        self._enter("push")
        found = self.images.get(image) or next((i for i in self.images.values() if i.id == image),
                                               None)
        if found is None:
            raise image_missing(image)
        self.images[target] = found
        on_event(BuildEvent(text=f"{found.id[7:19]}: Pushed", step="push"))
        if target not in self.push_digests:
            raise BuildError(f"push of {target} failed: connection refused", hint="start it")
        self.pushed.append(target)
        return self.push_digests[target]


class FakeClock:
    """Starts at `start`; `sleep` advances it. `interrupt_on_sleep=n` raises Ctrl-C at the n-th."""

    def __init__(
        self,
        start: float = 1000.0,
        wall: datetime = datetime(2026, 11, 29, 11, tzinfo=UTC),
        interrupt_on_sleep: int | None = None,
    ) -> None:
        self._start = start
        self.time = start
        self.wall = wall
        self.sleeps: list[float] = []
        self.interrupt_on_sleep = interrupt_on_sleep

    def monotonic(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.interrupt_on_sleep == len(self.sleeps):
            raise KeyboardInterrupt
        self.time += seconds

    def now(self) -> datetime:
        return self.wall + timedelta(seconds=self.time - self._start)


class FakeSglang:
    """/health_generate and /v1/models of an sglang server, one phase per health request.

    Phases: "refused" (nothing listens), "503" (warming up), "unlisted" (healthy, but /v1/models
    does not list the served name yet), "ready". The last phase repeats.
    """

    def __init__(self, served_name: str, phases: Sequence[str]) -> None:
        self.served_name = served_name
        self.phases = list(phases)
        self.health_requests = 0

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handle))

    def phase(self) -> str:
        return self.phases[min(self.health_requests, len(self.phases)) - 1]

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health_generate":
            self.health_requests += 1
        phase = self.phase() if self.health_requests else self.phases[0]
        if phase == "refused":
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/health_generate":
            return httpx.Response(503 if phase == "503" else 200)
        if request.url.path == "/v1/models":
            listed = [self.served_name] if phase == "ready" else ["another-model"]
            return httpx.Response(200, json={"object": "list", "data": [{"id": n} for n in listed]})
        return httpx.Response(404)


def fake_nvidia_smi(folder: Path) -> Path:
    """A FAKE `nvidia-smi` in `folder` (put it first on PATH): answers the driver query with
    $OPSCTL_FAKE_DRIVER, a SAMPLE value the test chooses (not a real driver's output), and
    fails anything else."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\n# FAKE nvidia-smi (a test sample, not a real driver's output)\n"
                      'case "$*" in *--query-gpu=driver_version*) printf "%s" "$OPSCTL_FAKE_'
                      'DRIVER";; *) exit 9;; esac\n')
    script.chmod(0o755)
    return folder
