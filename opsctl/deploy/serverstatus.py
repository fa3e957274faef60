"""`opsctl status`: every opsctl server as its labels, the engine and `up`'s verdict describe it.

Besides what it runs and whether it serves, a server that runs for weeks unattended needs three
more facts: its health check (Docker's HEALTHCHECK of sglang's /health), how often the engine's
restart policy restarted it, and why it last exited. A crash loop (the policy restarting a
server that keeps dying, or having given up after the last allowed restart) is said as such.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import httpx

from opsctl.config.runspec import NO_PATCH, server_labels
from opsctl.core import labels
from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.core.errors import OpsctlError
from opsctl.deploy import readiness
from opsctl.deploy.logsave import exit_text
from opsctl.deploy.state import StateDir
from opsctl.engine.api import ContainerInfo, Engine

HEALTH_LOG_CHARS = 100  # of the last failed check's output, in the health column


@dataclass(frozen=True)
class ServerStatus:
    name: str
    profile: str
    variant: str
    image: str
    patch_sha256: str
    uptime: str
    readiness: str
    verdict: str  # verified / MISMATCH: fields / not verified
    health: str = "-"  # healthy / starting / unhealthy: <last check's output>; "-" without a check
    restarts: str = "-"  # "1 of 3"; "-" without a restart policy
    last_exit: str = "-"  # "137 (killed for memory) at <time>"; "-" when it never exited
    crash_loop: str = ""  # why it is a crash loop; "" when it is not


def status(engine: Engine, *, http: Callable[[], httpx.Client] = readiness.http_client,
           clock: Clock = SYSTEM_CLOCK, state: StateDir | None = None) -> list[ServerStatus]:
    """Every opsctl server: what it runs (from its labels), for how long, its readiness now,
    its health, restarts and last exit, and `up`'s verdict on it (from `state`)."""
    rows = []
    with http() as client:
        for info in engine.find(server_labels()):
            found = info.labels
            rows.append(ServerStatus(
                name=info.name,
                profile=found.get(labels.PROFILE, "?"),
                variant=found.get(labels.VARIANT, "?"),
                image=found.get(labels.IMAGE, info.image),
                patch_sha256=found.get(labels.PATCH_SHA256, NO_PATCH),
                uptime=uptime(info, clock.now()),
                readiness=_readiness_of(client, info),
                verdict=_verdict_of(state, info),
                health=health_of(info),
                restarts=f"{info.restart_count} of {info.restart_max}" if info.restart_max
                else str(info.restart_count) if info.restart_count else "-",
                last_exit=last_exit(info),
                crash_loop=crash_loop(info),
            ))
    return rows


def health_of(info: ContainerInfo) -> str:
    """The health check's verdict; for a failing one, the last line its check printed. A
    stopped container's last verdict is stale: "-"."""
    if not info.health or info.status != "running":
        return "-"
    if info.health != "unhealthy":
        return info.health
    lines = [line for line in info.health_log.splitlines() if line.strip()]
    return f"unhealthy: {lines[-1].strip()[:HEALTH_LOG_CHARS]}" if lines else "unhealthy"


def last_exit(info: ContainerInfo) -> str:
    """Why and when it last exited; "-" when it never did."""
    if not info.finished_at and info.exit_code is None and info.last_exit_code is None:
        return "-"
    when = f" at {info.finished_at[:19]}Z" if info.finished_at else ""
    return f"{exit_text(info)}{when}"


def crash_loop(info: ContainerInfo) -> str:
    """Why the server is in a crash loop, or "": the policy used its last restart and the
    server is down again, or it is between two restarts after dying more than once."""
    if info.restart_max and info.restart_count >= info.restart_max and info.status != "running":
        return f"crash loop: gave up after {info.restart_count} restarts"
    if info.status == "restarting" and info.restart_count >= 1:
        limit = f" of {info.restart_max}" if info.restart_max else ""
        return f"crash loop: restarting ({info.restart_count}{limit} restarts so far)"
    return ""


def _verdict_of(state: StateDir | None, info: ContainerInfo) -> str:
    try:
        verdict = state.verdict(info.id) if state is not None else None
    except OpsctlError as exc:
        return f"unknown ({exc.message})"
    return verdict.summary() if verdict is not None else "not verified"


def _readiness_of(client: httpx.Client, info: ContainerInfo) -> str:
    if info.status != "running":
        code = info.exit_code if info.exit_code is not None else info.last_exit_code
        return f"{info.status} (exit {code})"
    state = readiness.probe(client, info.labels.get(labels.BASE_URL, ""),
                            info.labels.get(labels.SERVED_MODEL, ""))
    return state.phase.value


def uptime(info: ContainerInfo, now: datetime) -> str:
    """Docker's StartedAt (nanoseconds, Z) to `1h02m03s`; "-" when not running."""
    if info.status != "running" or not info.started_at:
        return "-"
    started = datetime.fromisoformat(info.started_at[:26].rstrip("Z") + "+00:00")
    seconds = int((now - started).total_seconds())
    hours, rest = divmod(max(seconds, 0), 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s"
