"""The deploy room's commands: `down`, `status`, `logs` and `up --dry-run` (`up` itself is
opsctl.deploy.launch's, beside the Launch whose collaborators it runs with).

Each function takes what it works with as arguments and returns a result object; `view.py` renders
it. Servers are found by opsctl's labels only, so nothing opsctl did not create is ever touched; a
run holds the profile's lock while it changes its containers, cleans up only what it created itself,
and no server leaves without its log saved (opsctl.deploy.ownership, custody, logsave).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from opsctl.argspec.resolution import GpuReport
from opsctl.config import resolve
from opsctl.config.profiles import Deployment
from opsctl.config.resolve import Resolved, Runner
from opsctl.config.review import VariantSummary, summary
from opsctl.config.runspec import base_url, run_spec, server_labels
from opsctl.core import labels
from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.core.errors import LaunchError, OpsctlError
from opsctl.core.files import check_output_path
from opsctl.core.paths import require_checkout
from opsctl.core.redact import redact_stream
from opsctl.deploy import ownership, readiness
from opsctl.deploy.custody import CLEANUP_GRACE_SECONDS as CLEANUP_GRACE_SECONDS
from opsctl.deploy.custody import Custody, Note
from opsctl.deploy.logsave import LOGS_DIR, named_secrets
from opsctl.deploy.preflight import describe as describe_preflight
from opsctl.deploy.serverstatus import ServerStatus as ServerStatus
from opsctl.deploy.serverstatus import status as status
from opsctl.deploy.serverstatus import uptime as uptime
from opsctl.deploy.state import CheckpointRecord, StateDir, Verdict
from opsctl.engine.api import ContainerInfo, Engine, RunSpec
from opsctl.verify.app import VerifyResult

ImageFor = Callable[[Deployment], str]
HttpFactory = Callable[[], httpx.Client]
# (deployment, its base URL, the container's log) -> what the server resolved vs the profile.
Verifier = Callable[[Deployment, str, str], VerifyResult]


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


def dry_run(deployment: Deployment, image_for: ImageFor, preflight: bool = True) -> DryRun:
    """What `up` would run (and check first, unless `preflight` is off); needs no engine and no
    prior build."""
    try:
        image = image_for(deployment)
    except OpsctlError as exc:
        # Say what is missing instead of failing: the rest of the plan is still worth reading.
        image = f"<{deployment.image.repository}: {exc.message}>"
    return DryRun(
        deployment=deployment,
        spec=run_spec(deployment, image),
        base_url=base_url(deployment),
        summary=summary(deployment),
        preflight=describe_preflight(deployment, image, enabled=preflight),
    )


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
            grace = grace_of(info) if grace_seconds is None else grace_seconds
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
    chunks = (
        engine.follow_logs(server.id, tail=tail)
        if follow
        else iter([engine.logs(server.id, tail=tail)])
    )
    secrets, _ = named_secrets(server.labels)  # sglang logs its arguments, --api-key's value too
    return LogsResult(container=server, chunks=redact_stream(chunks, secrets))


def grace_of(info: ContainerInfo) -> int:
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
