"""The deploy room's commands: `up`, `down`, `status`, `logs` and `up --dry-run`.

Each function takes what it works with as arguments (`up`: the launch, opsctl.deploy.launch,
with the engine, how to name the image, an HTTP client factory, a clock, the verify room's
check and the state directory; a progress callback, where removed servers' logs go) and
returns a result object; `view.py` renders it. Servers are
found by opsctl's labels only, so nothing opsctl did not create is ever touched; a run holds the
profile's lock while it changes its containers, cleans up only what it created itself, and no
server leaves without its log saved (opsctl.deploy.ownership, custody, logsave).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from opsctl.argspec.resolution import GpuReport
from opsctl.config import resolve
from opsctl.config.profiles import Deployment
from opsctl.config.resolve import Resolved, Runner
from opsctl.config.review import VariantSummary, summary
from opsctl.config.runspec import base_url, run_spec, server_labels
from opsctl.core import labels
from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.core.errors import LaunchError, OpsctlError, UsageError, is_ctrl_c, stop_reason
from opsctl.core.files import check_output_path
from opsctl.core.paths import require_checkout
from opsctl.core.redact import redact, redact_stream
from opsctl.deploy import ownership, readiness
from opsctl.deploy.custody import CLEANUP_GRACE_SECONDS as CLEANUP_GRACE_SECONDS
from opsctl.deploy.custody import Custody, Note, RunRecord, after_cleanup
from opsctl.deploy.logsave import LOGS_DIR, named_secrets
from opsctl.deploy.preflight import describe as describe_preflight
from opsctl.deploy.serverstatus import ServerStatus as ServerStatus
from opsctl.deploy.serverstatus import StatusResult as StatusResult
from opsctl.deploy.serverstatus import status as status
from opsctl.deploy.serverstatus import uptime as uptime
from opsctl.deploy.state import CheckpointRecord, StateDir, Verdict, host_checkpoint
from opsctl.engine.api import ContainerInfo, Engine, RunSpec
from opsctl.verify.app import VerifyMismatch, VerifyResult, raise_on_mismatch

if TYPE_CHECKING:
    from opsctl.deploy.launch import Launch

ImageFor = Callable[[Deployment], str]
HttpFactory = Callable[[], httpx.Client]
# (deployment, its base URL, the container's log) -> what the server resolved vs the profile.
Verifier = Callable[[Deployment, str, str], VerifyResult]
_ALIVE = {"created", "running"}
# The log lines each readiness report reads for the start-up phase (and the last line).
_PHASE_LOG_TAIL = 200


def _quiet(line: str) -> None:
    """The default `on_note`: a library caller that prints nothing."""


@dataclass(frozen=True)
class Progress:
    """One readiness report of `up`: the probe's phase, the time since start, the server's last
    log line and the start-up phase its log announced last ("" before the first)."""

    probe: readiness.Probe
    elapsed_seconds: float
    last_log_line: str
    server_phase: str = ""


@dataclass(frozen=True)
class UpResult:
    container: ContainerInfo
    base_url: str
    already_up: bool
    elapsed_seconds: float
    verdict: Verdict | None = None  # None when already up (its verdict was recorded then)


@dataclass(frozen=True)
class DryRun:
    deployment: Deployment
    spec: RunSpec
    base_url: str
    summary: VariantSummary  # the release it runs, what it computes, its release's warnings
    preflight: str = ""  # what `up` would check first (opsctl.deploy.preflight)


@dataclass(frozen=True)
class DownResult:
    removed: list[str]
    logs: list[Path] = field(default_factory=list)  # each removed server's saved log


@dataclass(frozen=True)
class LogsResult:
    container: ContainerInfo
    chunks: Iterator[str]


# --- up ----------------------------------------------------------------------------------------


def up(
    deployment: Deployment,
    launch: Launch,
    *,
    timeout_seconds: float | None = None,
    replace: bool = False,
    on_progress: Callable[[Progress], None] = lambda progress: None,
    logs_dir: Path = LOGS_DIR,
    on_note: Note = _quiet,
    preflight: bool = True,
) -> UpResult:
    """Start the deployment with the launch's collaborators (opsctl.deploy.launch: the engine,
    image naming, HTTP, clock), wait until it truly serves, then verify it (unless the launch's
    `verify` is None) and record the verdict and checkpoint in its state directory.

    First (unless `preflight` is False or the launch has none) the image loads the mounted
    checkpoint in a throwaway container (opsctl.deploy.preflight); a failure raises before
    anything is replaced or started.

    Holds the profile's lock throughout (ProfileBusy when another run holds it). On failure,
    timeout, mismatch or Ctrl-C it removes what this run created, found by its run id, saving
    each log under `logs_dir` first; a second Ctrl-C leaves it, and the error names what is left.
    """
    nnodes = deployment.server.nnodes
    if nnodes > 1:  # the other hosts' ranks would never join: the server would wait, not serve
        raise UsageError(f"profile {deployment.profile.name!r} spans {nnodes} hosts; `up` runs "
                         "one", hint="deploy it to a cluster: `opsctl render k8s` "
                         "(docs/kubernetes.md)")
    engine, state, clock = launch.engine, launch.state, launch.clock
    image = launch.image_for(deployment)
    image_labels = present_image(engine, deployment, image)
    check_output_path(logs_dir, "server log directory", directory=True)
    checkpoint = host_checkpoint(deployment.model.host_path)
    spec = run_spec(deployment, image, image_labels, environ=os.environ)  # secrets from the host
    run = RunRecord(ownership.new_run_id(), deployment.profile.name, spec.name)
    spec = dataclasses.replace(spec, labels={**spec.labels, labels.CHECKPOINT: checkpoint.label(),
                                             labels.RUN_ID: run.run_id})
    url = base_url(deployment)
    custody = Custody(engine, state, logs_dir, clock, on_note)
    with ownership.profile_locks(state, [run.profile], "up", clock):
        found = engine.find(server_labels(run.profile))
        for info in found:
            if info.status == "running" and not replace:
                if info.labels.get(labels.CONFIG_HASH) == spec.labels[labels.CONFIG_HASH]:
                    return UpResult(container=info, base_url=url, already_up=True,
                                    elapsed_seconds=0.0)
                raise LaunchError(
                    f"profile {run.profile!r} is already up with another configuration "
                    f"(variant {info.labels.get(labels.VARIANT)!r})",
                    hint="pass --replace to swap it, or `opsctl down` first",
                )
        # Before what runs is replaced: a failure leaves it serving.
        if preflight and launch.preflight is not None:
            on_note(launch.preflight(deployment, engine, image).summary())
        for info in found:
            on_note(f"removing {info.name} ({info.status}; saving its log first)")
            custody.retire(info, _grace(info), "replaced by `opsctl up`")
        with ownership.InterruptGuard() as guard:
            try:
                return _start(launch, deployment, spec, run, url, checkpoint,
                              timeout_seconds=timeout_seconds, on_progress=on_progress)
            except BaseException as exc:
                # Failure, timeout, a verify mismatch and Ctrl-C (even one that lands while the
                # container is being created) all remove what this run created, and only that.
                guard.cleaning()
                retired, left = custody.clean_up_run(run, f"`opsctl up` failed: {_why(exc)}",
                                                     is_ctrl_c(exc))
                raise after_cleanup(exc, retired, left) from None


def _start(launch: Launch, deployment: Deployment, spec: RunSpec, run: RunRecord, url: str,
           checkpoint: CheckpointRecord, *, timeout_seconds: float | None,
           on_progress: Callable[[Progress], None]) -> UpResult:
    settings = deployment.profile.readiness
    started = launch.engine.run(spec)
    run.known[started.id] = started.name
    elapsed = _wait_ready(
        launch, started.id, url, deployment.model.served_name,
        timeout_seconds=timeout_seconds or settings.timeout_seconds,
        poll_seconds=settings.poll_interval_seconds, on_progress=on_progress,
        secrets=named_secrets(spec.labels)[0],  # sglang logs its arguments, --api-key's too
    )
    container = launch.engine.inspect(started.id)
    verdict = _judge(launch, deployment, container, url, checkpoint)
    return UpResult(container=container, base_url=url, already_up=False,
                    elapsed_seconds=elapsed, verdict=verdict)


def _why(exc: BaseException) -> str:
    if is_ctrl_c(exc):
        return stop_reason(exc)
    return exc.message if isinstance(exc, OpsctlError) else f"{type(exc).__name__}: {exc}"


def present_image(engine: Engine, deployment: Deployment, image: str) -> dict[str, str]:
    """The labels of the image the deployment runs; LaunchError when the engine lacks it."""
    image_labels = engine.image_labels(image)
    if image_labels is None:
        raise LaunchError(
            f"image {image} is not present on this engine",
            hint=f"build it: `opsctl build --profile {deployment.profile.name}` "
            "(opsctl never pulls an image it builds)",
        )
    return image_labels


def _judge(launch: Launch, deployment: Deployment, container: ContainerInfo, url: str,
           checkpoint: CheckpointRecord) -> Verdict:
    """Verify the ready server against the profile, record the verdict, raise on a mismatch."""
    verify, state, clock = launch.verify, launch.state, launch.clock
    result = verify(deployment, url, launch.engine.logs(container.id)) if verify else None
    checks = result.checks if result else []
    verdict = Verdict(
        container_id=container.id, container=container.name, profile=deployment.profile.name,
        variant=deployment.variant, at=clock.now().isoformat(timespec="seconds"),
        verified=result is not None, fields={check.field: check.status for check in checks},
        mismatches=[f"{check.field}: expected {check.expected}, resolved {check.resolved}"
                    for check in checks if check.status == "mismatch"],
        checkpoint=checkpoint,
    )
    if state is not None:
        state.write_verdict(verdict)
    if result is not None:
        try:
            raise_on_mismatch(result)
        except VerifyMismatch as exc:
            exc.details.append("the container is removed: it does not run what the profile says")
            raise
    return verdict


def _wait_ready(
    launch: Launch,
    container_id: str,
    url: str,
    served_name: str,
    *,
    timeout_seconds: float,
    poll_seconds: float,
    on_progress: Callable[[Progress], None],
    secrets: list[str],
) -> float:
    engine = launch.engine

    def exited() -> readiness.Exited | None:
        # A server the restart policy brought back between two polls died too.
        info = engine.inspect(container_id)
        if info.status in _ALIVE and not info.restart_count:
            return None
        code = info.exit_code if info.exit_code is not None else info.last_exit_code
        return readiness.Exited(exit_code=code, log=engine.logs(container_id, tail=200))

    phase = ""  # kept when its line has scrolled out of the tail read

    def progress(state: readiness.Probe, elapsed: float) -> None:
        nonlocal phase
        lines = readiness.log_lines(engine.logs(container_id, tail=_PHASE_LOG_TAIL))
        phase = readiness.startup_phase("\n".join(lines)) or phase
        last = redact(lines[-1], *secrets)[-160:] if lines else ""
        on_progress(Progress(state, elapsed, last, phase))

    deadline = launch.clock.monotonic() + timeout_seconds

    def check(client: httpx.Client) -> readiness.Probe:
        left = deadline - launch.clock.monotonic()
        return readiness.probe(client, url, served_name, timeout_s=readiness.probe_timeout(left))

    with launch.http() as client:
        return readiness.wait_ready(
            lambda: check(client), exited=exited,
            timeout_seconds=timeout_seconds, poll_seconds=poll_seconds, clock=launch.clock,
            on_progress=progress, cleanup="",  # the cleanup appends what became of it
        )


def dry_run(deployment: Deployment, image_for: ImageFor, preflight: bool = True) -> DryRun:
    """What `up` would run (and check first, unless `preflight` is off); needs no engine and no
    prior build."""
    try:
        image = image_for(deployment)
    except OpsctlError as exc:
        # Say what is missing instead of failing: the rest of the plan is still worth reading.
        image = f"<{deployment.image.repository}: {exc.message}>"
    return DryRun(deployment=deployment, spec=run_spec(deployment, image), base_url=base_url(deployment),
                  summary=summary(deployment),
                  preflight=describe_preflight(deployment, image, enabled=preflight))


# --- down, status, logs ------------------------------------------------------------------------


def find_servers(engine: Engine, profile_name: str | None = None) -> list[ContainerInfo]:
    """opsctl's server containers (of one profile, or all), running or not."""
    return engine.find(server_labels(profile_name))


def base_url_for(engine: Engine, profile_name: str) -> str:
    """URL of the profile's running server, found by label (LaunchError when none runs)."""
    running = [i for i in find_servers(engine, profile_name) if i.status == "running"]
    if not running:
        raise LaunchError(
            f"no running opsctl server for profile {profile_name!r}",
            hint=f"start it with `opsctl up --profile {profile_name}`, or pass --base-url",
        )
    return running[0].labels[labels.BASE_URL]


def checkpoint_of(info: ContainerInfo) -> dict[str, str | None] | None:
    """The checkpoint a server runs, as `up` labelled it, in the shape of a smoke report's
    `checkpoint` field ({"id": sha256} or {"id": None, "unavailable": reason}); None for a
    container started before opsctl recorded it. For the traffic room's `locate` collaborator."""
    record = CheckpointRecord.from_label(info.labels.get(labels.CHECKPOINT))
    return None if record is None else {"id": record.id, "unavailable": record.unavailable}


def down(engine: Engine, profile_name: str | None = None, grace_seconds: int | None = None,
         state: StateDir | None = None, *, logs_dir: Path = LOGS_DIR, clock: Clock = SYSTEM_CLOCK,
         on_note: Note = _quiet) -> DownResult:
    """Stop and remove opsctl's server containers (of one profile, or all), each log saved under
    `logs_dir` first, and their verdicts; under the locks of their profiles."""
    found = find_servers(engine, profile_name)
    if not found:
        return DownResult(removed=[])
    check_output_path(logs_dir, "server log directory", directory=True)
    profiles = {info.labels.get(labels.PROFILE, "") for info in found} - {""}
    custody = Custody(engine, state, logs_dir, clock, on_note)
    removed, saved = [], []
    with ownership.profile_locks(state, profiles, "down", clock):
        for info in find_servers(engine, profile_name):  # again: what runs now, under the locks
            on_note(f"stopping {info.name} (saving its log first)")
            grace = _grace(info) if grace_seconds is None else grace_seconds
            try:
                retired = custody.retire(info, grace, "`opsctl down`")
            except OpsctlError as exc:  # a lost daemon, a full disk: say what is left
                raise left_behind(exc, info) from None
            removed.append(retired.name)
            if retired.log is not None:
                saved.append(retired.log)
    return DownResult(removed=removed, logs=saved)


def left_line(info: ContainerInfo) -> str:
    """The line naming a container a removal left, and the commands that remove it."""
    profile = info.labels.get(labels.PROFILE, "")
    return (f"{info.name} ({info.id[:12]}) is left: `opsctl down"
            + (f" --profile {profile}" if profile else "")
            + f"` removes it, saving its log (or `docker rm -f {info.id[:12]}`)")


def left_behind(exc: OpsctlError, info: ContainerInfo) -> OpsctlError:
    """`exc` naming the container a removal left, and the commands that remove it; its
    `left` holds that line for a report (decide's)."""
    left = left_line(info)
    exc.add_clause(left)
    if left not in exc.left:
        exc.left.append(left)
    return exc


def logs(engine: Engine, profile_name: str | None, *, follow: bool, tail: int) -> LogsResult:
    """The log of the one server (of `profile_name`, or the only one running)."""
    servers = find_servers(engine, profile_name)
    if not servers:
        raise LaunchError("no opsctl server container found", hint="`opsctl status` lists them")
    if len(servers) > 1:
        names = ", ".join(i.labels.get(labels.PROFILE, i.name) for i in servers)
        raise LaunchError(f"several servers run ({names})", hint="choose one with --profile")
    server = servers[0]
    chunks = engine.follow_logs(server.id, tail=tail) if follow else iter([engine.logs(server.id, tail=tail)])
    secrets, _ = named_secrets(server.labels)  # sglang logs its arguments, --api-key's value too
    return LogsResult(container=server, chunks=redact_stream(chunks, secrets))


def _grace(info: ContainerInfo) -> int:
    return int(info.labels.get(labels.STOP_GRACE_SECONDS, "30"))


@dataclass(frozen=True)
class ResolveResult:
    """`profile resolve`: each variant's record, and the record files written (if asked)."""

    resolved: list[Resolved]
    written: list[Path] = field(default_factory=list)


def profile_resolve(deployments: list[Deployment], gpu_for: Callable[[Deployment], GpuReport],
                    model_config: Path | None = None, write_records: bool = False,
                    runner: Runner | None = None, on_note: Note = _quiet) -> ResolveResult:
    """The pinned releases' own resolution of each deployment (opsctl.config.resolve).

    With `write_records`, every record is written (atomically) and records of these profiles'
    variants that no longer exist are removed. Without, a variant the release refuses is an
    error (exit 2) after its record is returned for printing. What it downloads first (the
    release's wheel, its side environment, a CPU torch) is announced through `on_note`.
    """
    if write_records:
        require_checkout("profile resolve --write-records")
    resolved = resolve.resolve(deployments, gpu_for, model_config, runner, on_note)
    if write_records:
        profiles = sorted({d.profile.name for d in deployments})
        return ResolveResult(resolved, resolve.write(resolved, stale_from=profiles))
    return ResolveResult(resolved)
