"""The one launch of a profile's variant: what `up`, `up --gate`, `decide`, `tune` and
`bench --variants` start and remove servers through.

A `Launch` carries what every start needs and the CLI's composition root builds once per
command: the engine, how the image is named, the verify room's check, the state directory
(the profile's lock, the verdict, the checkpoint record), the HTTP client factory for readiness,
the clock and the preflight. Its `up` is `deploy.app.up` with all of them, so every launch is
verified, holds the profile's lock and records its verdict the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from opsctl.config.profiles import Deployment, Profile
from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.deploy import ownership, readiness
from opsctl.deploy.app import (
    DownResult,
    HttpFactory,
    ImageFor,
    Progress,
    UpResult,
    Verifier,
    down,
    present_image,
    up,
)
from opsctl.deploy.custody import Note
from opsctl.deploy.logsave import LOGS_DIR
from opsctl.deploy.preflight import Preflight, run_preflight
from opsctl.deploy.state import StateDir
from opsctl.engine.api import Engine


def _quiet(line: str) -> None:
    """The default `on_note`: print nothing."""


def _no_progress(progress: Progress) -> None:
    """The default `on_progress`: show nothing."""


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
        """`deploy.app.up` with this launch's collaborators; `image` overrides the naming (a
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
