"""What opsctl remembers on this host between commands: `up`'s verdict per container, the
checkpoint it ran, and each profile's last good variant after `up --gate`.

A container carries only labels; what `up` learned after the start (each verified field, the
checkpoint it hashed on the host) and what a gate proved (the variant, image and smoke report a
rollback brings back) must outlive the command. Each is a small JSON file, written atomically:

    <state dir>                          $OPSCTL_STATE_DIR, else $XDG_STATE_HOME/opsctl,
                                         else ~/.local/state/opsctl
      containers/<container id>.json     `up`'s verdict on that container (see `Verdict`)
      gates/<profile>/last-good.json     the last variant that passed `up --gate` (`LastGood`)
      gates/<profile>/smoke-<UTC stamp>-<variant>.json   the smoke report of each gate run
      locks/<profile>.lock               held while a run changes the profile's containers
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from opsctl.core.checkpoint import checkpoint_id
from opsctl.core.errors import UsageError
from opsctl.core.files import atomic_write_text, read_bounded
from opsctl.core.paths import default_state_dir
from opsctl.core.reports import stamp

UNAVAILABLE = "unavailable: "  # how a checkpoint label starts when nothing could be hashed
LAST_GOOD = "last-good.json"
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckpointRecord(_Record):
    """Which weights a server runs: the combined sha256 of config.json and the safetensors
    index (opsctl.core.checkpoint), or why there is none."""

    id: str | None = None
    files: dict[str, str] = {}
    unavailable: str | None = None

    def label(self) -> str:
        """The value of the `opsctl.checkpoint` label."""
        return self.id if self.id else f"{UNAVAILABLE}{self.unavailable}"

    @classmethod
    def from_label(cls, value: str | None) -> CheckpointRecord | None:
        if value is None:
            return None
        if value.startswith(UNAVAILABLE):
            return cls(unavailable=value.removeprefix(UNAVAILABLE))
        return cls(id=value)


def host_checkpoint(host_path: str | None) -> CheckpointRecord:
    """The checkpoint identity of the weights `up` mounts, hashed on this host.

    Weights that cannot be hashed are recorded as unavailable, never a failure: the simulator
    mounts none, and a real server without its weights fails its own start anyway.
    """
    if not host_path:
        return CheckpointRecord(unavailable="the profile mounts no weights (model.host_path unset)")
    path = Path(host_path)
    if not path.is_dir():
        return CheckpointRecord(unavailable=f"{host_path} is not a directory on this host")
    try:
        found = checkpoint_id(path)
    except UsageError as exc:
        return CheckpointRecord(unavailable=exc.message)
    except OSError as exc:
        return CheckpointRecord(unavailable=f"cannot read {host_path}: {exc.strerror}")
    return CheckpointRecord(id=found.combined, files=found.files)


class Verdict(_Record):
    """`up`'s verdict on one container: each checked field's status (ok, mismatch, unknown)."""

    container_id: str
    container: str
    profile: str
    variant: str
    at: str  # ISO 8601, UTC
    verified: bool  # False: started with --no-verify
    fields: dict[str, str] = {}
    mismatches: list[str] = []  # "field: expected X, resolved Y"
    checkpoint: CheckpointRecord

    def summary(self) -> str:
        """The `status` column: verified / MISMATCH: fields / not verified."""
        if not self.verified:
            return "not verified"
        if self.mismatches:
            names = [field for field, status in self.fields.items() if status == "mismatch"]
            return "MISMATCH: " + ", ".join(names)
        unknown = sum(status == "unknown" for status in self.fields.values())
        return f"verified ({unknown} unknown)" if unknown else "verified"


class LastGood(_Record):
    """The last variant of a profile that passed `up --gate`: what a failed gate brings back."""

    profile: str
    variant: str
    image: str
    config_hash: str
    report: str  # its smoke report: the reference of the next gate's compare
    at: str  # ISO 8601, UTC
    checkpoint: CheckpointRecord | None = None


def _safe(name: str, what: str) -> str:
    if not _SAFE.fullmatch(name):
        raise UsageError(f"{what} {name!r} cannot name a state file",
                         hint="use letters, digits, '.', '_' and '-' only")
    return name


MAX_STATE_BYTES = 1 << 20  # a verdict or a last-good record is a few KiB


def _load(path: Path, model: type[_Record]) -> Any:
    try:
        return model.model_validate_json(read_bounded(path, "state file", MAX_STATE_BYTES))
    except FileNotFoundError:
        return None
    except (ValidationError, ValueError, OSError) as exc:
        raise UsageError(f"state file {path} is unreadable ({type(exc).__name__})",
                         hint="remove it: opsctl then knows nothing of what it recorded") from None


class StateDir:
    """The state directory; nothing is created until something is recorded."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def default(cls) -> StateDir:
        return cls(default_state_dir())

    def _verdict_path(self, container_id: str) -> Path:
        return self.root / "containers" / f"{_safe(container_id, 'container id')}.json"

    def _gate_dir(self, profile: str) -> Path:
        return self.root / "gates" / _safe(profile, "profile")

    def write_verdict(self, verdict: Verdict) -> Path:
        return atomic_write_text(self._verdict_path(verdict.container_id),
                                 verdict.model_dump_json(indent=2) + "\n")

    def verdict(self, container_id: str) -> Verdict | None:
        found: Verdict | None = _load(self._verdict_path(container_id), Verdict)
        return found

    def forget(self, container_id: str) -> None:
        """Drop a removed container's verdict."""
        self._verdict_path(container_id).unlink(missing_ok=True)

    def lock_path(self, profile: str) -> Path:
        """The flock of `up`/`down`/`up --gate` on one profile (opsctl.deploy.ownership)."""
        return self.root / "locks" / f"{_safe(profile, 'profile')}.lock"

    def last_good_path(self, profile: str) -> Path:
        return self._gate_dir(profile) / LAST_GOOD

    def last_good(self, profile: str) -> LastGood | None:
        found: LastGood | None = _load(self.last_good_path(profile), LastGood)
        return found

    def write_last_good(self, record: LastGood) -> Path:
        return atomic_write_text(self.last_good_path(record.profile),
                                 record.model_dump_json(indent=2) + "\n")

    def gate_report_path(self, profile: str, variant: str, now: datetime) -> Path:
        """Where a gate run's smoke report goes (kept: a later gate compares with it)."""
        return self._gate_dir(profile) / f"smoke-{stamp(now)}-{_safe(variant, 'variant')}.json"
