"""Removing server containers: never without saving the log first, and after a failed or
interrupted `up` only what that run created, retried while the daemon is away.

`retire` is the one way a server leaves: stop (its grace), save the whole log
(opsctl.deploy.logsave), remove, forget `up`'s verdict. A log that cannot be written keeps the
container (stopped): its log is still in the engine, and `down` tries again.

`clean_up_run` removes the containers carrying one run's `opsctl.run-id`. A daemon that does not
answer is retried for `DAEMON_RETRY_SECONDS`; whatever is still there then is named, as is what
a second Ctrl-C leaves, so the one-line error says exactly what runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from opsctl.core import labels
from opsctl.core.clock import Clock
from opsctl.core.errors import (
    ContainerGone,
    DaemonUnreachable,
    Interrupted,
    OpsctlError,
    UsageError,
)
from opsctl.core.interrupts import SecondInterrupt, interrupted_by
from opsctl.deploy.logsave import save_log
from opsctl.deploy.state import StateDir
from opsctl.engine.api import ContainerInfo, Engine

# Seconds a server left over by a failed or interrupted `up` gets to stop.
CLEANUP_GRACE_SECONDS = 5
# How long a cleanup keeps asking a daemon that does not answer, and how often.
DAEMON_RETRY_SECONDS = 20.0
RETRY_EVERY_SECONDS = 2.0

Note = Callable[[str], None]


@dataclass(frozen=True)
class Retired:
    """A removed server and where its log went."""

    name: str
    container_id: str
    log: Path | None  # None: it was gone before its log could be read


@dataclass
class RunRecord:
    """One `up` run: its id label, its profile, the container name it asks for, and the ids it
    knows it created (none yet when a create was cut off: the label finds it)."""

    run_id: str
    profile: str
    name: str
    known: dict[str, str] = field(default_factory=dict)  # container id -> name


@dataclass
class Custody:
    """What removing a server needs: the engine, the state (verdicts), where logs go, a clock
    and a line printer for what happens."""

    engine: Engine
    state: StateDir | None
    logs_dir: Path
    clock: Clock
    on_note: Note = field(default=lambda line: None)

    def retire(self, info: ContainerInfo, grace_seconds: int, reason: str) -> Retired:
        """Stop `info`, save its whole log, remove it and forget its verdict. A container gone
        meanwhile, or being removed (a removal a Ctrl-C cut short, which the daemon finishes), is
        retired with no log."""
        self.engine.stop(info.id, grace_seconds)
        try:
            stopped = self.engine.inspect(info.id)
        except ContainerGone:
            return self._gone(info)
        if stopped.status == "removing":  # a removal under way: the engine has no log to give
            self.engine.remove(info.id)  # waits for it
            return self._gone(info)
        try:
            path = save_log(self.engine, stopped, self.logs_dir, reason, self.clock.now())
        except OSError as exc:
            raise UsageError(
                f"cannot save the log of {info.name} under {self.logs_dir}: "
                f"{exc.strerror or exc}; {info.name} is stopped, not removed",
                hint=f"free space or fix {self.logs_dir}, then `opsctl down` again "
                f"(meanwhile `docker logs {info.id[:12]}` shows the log)",
            ) from None
        self.engine.remove(info.id)
        if self.state is not None:
            self.state.forget(info.id)
        return Retired(info.name, info.id, path)

    def _gone(self, info: ContainerInfo) -> Retired:
        """Retired with no log: the engine removed it, or is removing it, already."""
        if self.state is not None:
            self.state.forget(info.id)
        return Retired(info.name, info.id, None)

    def clean_up_run(self, run: RunRecord, reason: str,
                     interrupted: bool) -> tuple[list[Retired], str | None]:
        """Remove every container labelled with the run's id, saving each log first; a Ctrl-C
        meanwhile (the second, when `interrupted`) leaves them.

        Returns what was removed and, when something may be left, a sentence naming it and
        how to remove it.
        """
        ctrl_c = f"{interrupted_by()} again" if interrupted else "Ctrl-C"
        known, profile = run.known, run.profile
        retired: list[Retired] = []
        deadline = self.clock.monotonic() + DAEMON_RETRY_SECONDS
        waited = False
        while True:
            try:
                for info in self.engine.find({labels.RUN_ID: run.run_id}):
                    known[info.id] = info.name
                    self.on_note(f"stopping {info.name} (saving its log first); {ctrl_c} to "
                                 "leave it running")
                    retired.append(self.retire(info, CLEANUP_GRACE_SECONDS, reason))
                return retired, None
            except SecondInterrupt:
                return retired, (f"left as it is ({ctrl_c}): {_names(run, retired)}; "
                                 f"`opsctl down --profile {profile}` removes it, saving its log")
            except DaemonUnreachable as exc:
                if self.clock.monotonic() >= deadline:
                    return retired, (
                        f"left behind: {_names(run, retired)}, the engine did not answer for "
                        f"{DAEMON_RETRY_SECONDS:.0f} s ({exc.message}); `opsctl down --profile "
                        f"{profile}` removes it once the engine answers")
                if not waited:
                    self.on_note(f"the engine does not answer ({exc.message}); trying again for "
                                 f"{DAEMON_RETRY_SECONDS:.0f} s (Ctrl-C to give up)")
                    waited = True
                try:
                    self.clock.sleep(RETRY_EVERY_SECONDS)
                except SecondInterrupt:
                    return retired, (f"left behind ({ctrl_c}): {_names(run, retired)}; "
                                     f"`opsctl down --profile {profile}` removes it")
            except OpsctlError as exc:
                return retired, (f"left behind: {_names(run, retired)} ({exc.message}); "
                                 f"`opsctl down --profile {profile}` removes it")


def _names(run: RunRecord, retired: list[Retired]) -> str:
    gone = {item.container_id for item in retired}
    left = [f"{name} ({cid[:12]})" for cid, name in run.known.items() if cid not in gone]
    return ", ".join(left) or f"{run.name} if the engine created it (label {labels.RUN_ID}=" \
        f"{run.run_id})"


def after_cleanup(cause: BaseException, retired: list[Retired], left: str | None) -> BaseException:
    """What a failed run raises once it cleaned up: its own error, saying what became of the
    container; a Ctrl-C that left something becomes exit 130 with one line naming it."""
    done = "; ".join(f"container removed: {item.name}, its log saved to {item.log}"
                     if item.log else f"container removed: {item.name}" for item in retired)
    said = left or done
    if isinstance(cause, KeyboardInterrupt):
        if left is None:
            return cause
        return Interrupted(f"interrupted ({interrupted_by()}); {left}",
                           hint="`opsctl status` shows what runs")
    if isinstance(cause, OpsctlError):
        if said:
            cause.add_clause(said)
        return cause
    if left is not None:
        cause.add_note(left)
    return cause
