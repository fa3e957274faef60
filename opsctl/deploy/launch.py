"""The one launch of a profile's variant: what `up`, `up --gate`, `decide`, `tune` and
`bench --variants` start and remove servers through.

A `Launch` carries what every start needs and the CLI's composition root builds once per
command: the engine, how the image is named, the verify room's check, the state directory
(the profile's lock, the verdict, the checkpoint record), the HTTP client factory for readiness,
the clock and the preflight. Its `up` is this module's `up` with all of them, so every launch
is verified, holds the profile's lock and records its verdict the same way.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import httpx

from opsctl.config.profiles import Deployment, Profile
from opsctl.config.runspec import base_url, run_spec, server_labels
from opsctl.core import labels
from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.core.errors import LaunchError, OpsctlError, UsageError, stop_reason
from opsctl.core.files import check_output_path
from opsctl.core.redact import redact
from opsctl.deploy import ownership, readiness
from opsctl.deploy.app import (
    DownResult,
    HttpFactory,
    ImageFor,
    Progress,
    UpResult,
    Verifier,
    down,
    grace_of,
    present_image,
)
from opsctl.deploy.custody import Custody, Note, RunRecord, after_cleanup
from opsctl.deploy.logsave import LOGS_DIR, named_secrets
from opsctl.deploy.preflight import Preflight, run_preflight
from opsctl.deploy.state import CheckpointRecord, StateDir, Verdict, host_checkpoint
from opsctl.engine.api import ContainerInfo, Engine, RunSpec
from opsctl.verify.app import VerifyMismatch, raise_on_mismatch

_ALIVE = {"created", "running"}
# The log lines each readiness report reads for the start-up phase (and the last line).
_PHASE_LOG_TAIL = 200


def _quiet(line: str) -> None:
    """The default `on_note`: print nothing."""


def _no_progress(progress: Progress) -> None:
    """The default `on_progress`: show nothing."""


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
    """Start the deployment with the launch's collaborators (the engine, image naming, HTTP,
    clock), wait until it truly serves, then verify it (unless the launch's
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
            custody.retire(info, grace_of(info), "replaced by `opsctl up`")
        with ownership.InterruptGuard() as guard:
            try:
                return _start(launch, deployment, spec, run, url, checkpoint,
                              timeout_seconds=timeout_seconds, on_progress=on_progress)
            except BaseException as exc:
                # Failure, timeout, a verify mismatch and Ctrl-C (even one that lands while the
                # container is being created) all remove what this run created, and only that.
                guard.cleaning()
                retired, left = custody.clean_up_run(run, f"`opsctl up` failed: {_why(exc)}",
                                                     isinstance(exc, KeyboardInterrupt))
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
    if isinstance(exc, KeyboardInterrupt):
        return stop_reason(exc)
    return exc.message if isinstance(exc, OpsctlError) else f"{type(exc).__name__}: {exc}"


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


@dataclass(frozen=True)
class Launch:
    """Start and remove a profile's servers with one set of collaborators."""

    engine: Engine
    image_for: ImageFor
    verify: Verifier | None  # None only for `up --no-verify` (`status` says "not verified")
    state: StateDir | None  # None: a library caller that keeps no state (no lock, no verdict)
    http: HttpFactory = readiness.http_client
    clock: Clock = SYSTEM_CLOCK
    preflight: Preflight | None = run_preflight  # None: `--skip-preflight`

    def image(self, deployment: Deployment) -> str:
        """The image the deployment runs; LaunchError when the engine lacks it."""
        image = self.image_for(deployment)
        present_image(self.engine, deployment, image)
        return image

    def up(self, deployment: Deployment, *, image: str | None = None,
           timeout_seconds: float | None = None, replace: bool = False,
           on_progress: Callable[[Progress], None] = _no_progress, on_note: Note = _quiet,
           logs_dir: Path = LOGS_DIR, preflight: bool = True) -> UpResult:
        """`up` with this launch's collaborators; `image` overrides the naming (a
        rollback to the recorded image), `preflight=False` when the caller ran it already."""
        launch = self if image is None else dataclasses.replace(self, image_for=lambda _: image)
        return up(deployment, launch, timeout_seconds=timeout_seconds, replace=replace,
                  on_progress=on_progress, logs_dir=logs_dir, on_note=on_note,
                  preflight=preflight)

    def down(self, profile_name: str | None, *, grace_seconds: int | None = None,
             logs_dir: Path = LOGS_DIR, on_note: Note = _quiet) -> DownResult:
        """`deploy.app.down` of the profile's servers (logs saved first), under its lock."""
        return down(self.engine, profile_name, grace_seconds, self.state, logs_dir=logs_dir,
                    clock=self.clock, on_note=on_note)

    def locked(self, profiles: Iterable[str], command: str) -> AbstractContextManager[None]:
        """Hold the profiles' locks across several launches (each `up`/`down` re-enters them)."""
        return ownership.profile_locks(self.state, profiles, command, self.clock)

    def verifying(self, verify: Verifier) -> Launch:
        """The same launch with another verify check (decide records what its check answers)."""
        return dataclasses.replace(self, verify=verify)

    def kept_state(self, command: str) -> StateDir:
        """The state directory a command that records a last good variant needs."""
        if self.state is None:
            raise ValueError(f"{command} needs a state directory")
        return self.state


class VariantLauncher:
    """`bench --variants`' launcher (traffic.bench.Launcher): `up` a variant through the launch
    and `down` it afterwards, unless it was already up before."""

    def __init__(self, profile: Profile, launch: Launch) -> None:
        self.profile = profile
        self.launch = launch
        self.started: set[str] = set()

    def up(self, variant: str) -> str:
        running = self.launch.up(self.profile.resolve(variant))
        if not running.already_up:
            self.started.add(variant)
        return running.base_url

    def down(self, variant: str) -> None:
        if variant in self.started:
            self.launch.down(self.profile.name)
            self.started.discard(variant)
