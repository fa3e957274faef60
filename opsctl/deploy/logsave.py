"""A server's whole log, saved under the output directory before its container is removed.

Removing a container deletes its log with it, and the log is what explains a crash, an OOM or a
failed gate. So every removal of a server (`down`, `--replace`, a failed or interrupted `up`, a
gate's rollback) first writes

    out/logs/<profile>-<variant>-<container short id>-<UTC stamp>.log

with a header (container id, name, image, exit code, restarts, labels, time, why it is removed)
and then the log as `docker logs --timestamps` gives it (each long line whole), secrets masked,
streamed to disk (the engine's json-file rotation bounds it), written atomically: the file is
whole or absent.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path

from opsctl.core import labels
from opsctl.core.files import atomic_write_chunks
from opsctl.core.redact import redact_byte_stream
from opsctl.core.reports import REPORTS_DIR, stamp
from opsctl.engine.api import ContainerInfo, Engine

LOGS_DIR = REPORTS_DIR / "logs"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def secret_names(container_labels: Mapping[str, str]) -> list[str]:
    """The host variables a server's `opsctl.secret-env` label names."""
    return [name for name in container_labels.get(labels.SECRET_ENV, "").split(",") if name]


def named_secrets(container_labels: Mapping[str, str],
                  environ: Mapping[str, str] | None = None) -> tuple[list[str], list[str]]:
    """The values of the variables the label names, as set in `environ` (the host's), and the
    names this environment does not set (their values cannot be masked here)."""
    env = os.environ if environ is None else environ
    names = secret_names(container_labels)
    return [env[name] for name in names if env.get(name)], [n for n in names if not env.get(n)]


def log_path(logs_dir: Path, info: ContainerInfo, now: datetime) -> Path:
    """Where the log of `info` goes when it is saved at `now`."""
    parts = [info.labels.get(labels.PROFILE, "unknown"), info.labels.get(labels.VARIANT, "unknown"),
             info.id[:12], stamp(now)]
    return logs_dir / ("-".join(_UNSAFE.sub("_", part) for part in parts) + ".log")


def exit_text(info: ContainerInfo) -> str:
    """How the container last ended: "137 (killed for memory)", "none (running)", ..."""
    code = info.exit_code if info.exit_code is not None else info.last_exit_code
    if code is None:
        return f"none ({info.status})"
    notes = [
        *(["killed for memory"] if info.oom_killed else []),
        *([info.error] if info.error else []),
    ]
    return f"{code}" + (f" ({'; '.join(notes)})" if notes else "")


def header(info: ContainerInfo, reason: str, now: datetime, unmasked: list[str]) -> str:
    names = secret_names(info.labels)
    lines = [
        "# opsctl saved this log before removing the container",
        f"# container: {info.id}",
        f"# name: {info.name}",
        f"# image: {info.image}",
        f"# exit code: {exit_text(info)}",
        f"# restarts: {info.restart_count}",
        f"# saved at: {now.isoformat(timespec='seconds')}",
        f"# reason: {' '.join(reason.split())}",
        *(f"# label {key}={' '.join(value.split())}" for key, value in sorted(info.labels.items())),
        *(
            [f"# masked: the values of ${', $'.join(names)}, the API key, URL credentials"]
            if names
            else []
        ),
        *(
            [f"# NOT masked (not set where opsctl ran): ${', $'.join(unmasked)}"]
            if unmasked
            else []
        ),
        "# --- log (docker logs --timestamps) ---",
    ]
    return "\n".join(lines) + "\n"


def save_log(engine: Engine, info: ContainerInfo, logs_dir: Path, reason: str,
             now: datetime) -> Path:
    """Write the whole log of `info` (stopped, so it is complete) with its header; returns the
    path. OSError when the file cannot be written, DaemonUnreachable when the engine breaks off;
    either way no partial file is left. Secrets are masked: the API key, URL credentials, and
    the values of the host variables the server was given (its `opsctl.secret-env` label)."""
    secrets, unmasked = named_secrets(info.labels)
    chunks: Iterator[bytes] = itertools.chain([header(info, reason, now, unmasked).encode()],
                                              engine.log_chunks(info.id))
    return atomic_write_chunks(log_path(logs_dir, info, now), redact_byte_stream(chunks, secrets))
