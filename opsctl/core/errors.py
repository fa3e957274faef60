"""The errors a user can cause, each with its documented exit code and a hint.

The CLI reports every OpsctlError in one place as two lines (the message, then the hint) and
exits with the error's code. Foreign exceptions a user or a peer can cause (OS, decoding, YAML,
HTTP, Docker) are mapped to these codes by family in opsctl.core.failures; anything else is a
bug and exits 1 with a traceback.

`EXIT_CODES` is the one table of exit codes: `opsctl --help` is rendered from it and README's
"Exit codes" section must equal `exit_codes_markdown()` (a unit test compares them).

Termination is interruption: SIGTERM (`kill`, `timeout`, `systemctl stop`, a cancelled CI job)
and SIGHUP (a closed terminal) are taken as Ctrl-C is (opsctl.core.interrupts), so every clean-up
and partial report written for Ctrl-C holds for them too; `Interrupted` exits 128 + the first
interrupting signal's number (130, 143, 129).
"""

from __future__ import annotations

import signal
import traceback
from dataclasses import dataclass

from opsctl.core.interrupts import exit_code, interrupted_by

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USAGE = 2
EXIT_BUILD = 3
EXIT_LAUNCH = 4
EXIT_SMOKE = 5
EXIT_DAEMON = 6
EXIT_HOST = 7
# Interrupted: 128 + the signal's number, as a shell reports a command the signal stopped.
EXIT_HANGUP = 128 + signal.SIGHUP  # 129: the terminal closed
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130: Ctrl-C (typer's own exit status for it too)
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: kill, timeout, systemctl stop, CI cancelling


@dataclass(frozen=True)
class ExitCode:
    code: int
    name: str
    meaning: str  # short: what `--help` lists
    detail: str = ""  # what else README says about it


EXIT_CODES = (
    ExitCode(EXIT_OK, "ok", "ok"),
    ExitCode(EXIT_BUG, "bug", "unexpected bug", "the only case with a traceback"),
    ExitCode(EXIT_USAGE, "usage", "bad usage or invalid profile",
             "YAML, schema, a flag the pinned sglang does not know, a variant that cannot work "
             "on the pinned version, a bad option value, a path opsctl cannot read or write, "
             "text that is not UTF-8, input nested too deeply, an invalid URL"),
    ExitCode(EXIT_BUILD, "build", "build failed",
             "including a patch that does not apply, post-build verification, and a push "
             "the registry refuses or that cannot reach it"),
    ExitCode(EXIT_LAUNCH, "launch", "launch or readiness failed",
             "including a server that cannot be reached or breaks off its answer, a "
             "checkpoint the image cannot load (`up`'s preflight), and the Docker engine "
             "refusing a request"),
    ExitCode(EXIT_SMOKE, "smoke", "smoke check or SLO failed",
             "including a failed bench request"),
    ExitCode(EXIT_DAEMON, "daemon", "Docker daemon unreachable",
             "or failing in the middle of a call"),
    ExitCode(EXIT_HOST, "host", "host not ready",
             "`opsctl doctor`: a check failed; its table says which and the fix"),
    ExitCode(EXIT_HANGUP, "hangup", "hung up",
             "SIGHUP: the terminal closed; as 130"),
    ExitCode(EXIT_INTERRUPTED, "interrupted", "interrupted",
             "Ctrl-C; what the run started is removed first (`up` its container) and a report "
             "it had begun is marked partial"),
    ExitCode(EXIT_TERMINATED, "terminated", "terminated",
             "SIGTERM: `kill`, `timeout`, `systemctl stop`, a cancelled CI job; as 130"),
)


def exit_codes_help() -> str:
    """One line for `opsctl --help`."""
    return "Exit codes: " + "; ".join(f"{c.code} {c.meaning}" for c in EXIT_CODES) + "."


def exit_codes_markdown() -> str:
    """README's exit-code table (between its `exit-codes` markers)."""
    rows = [f"| {c.code} | {c.meaning}{f' ({c.detail})' if c.detail else ''} |" for c in EXIT_CODES]
    return "\n".join(["| code | meaning |", "|---:|---|", *rows]) + "\n"


class OpsctlError(Exception):
    """Base of every error a user can cause. `message` is one line; `hint` says what to do
    (`default_hint` when none is given: a class whose every instance has the same advice)."""

    exit_code = EXIT_BUG
    default_hint = ""

    def __init__(self, message: str, hint: str = "", details: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint or self.default_hint
        # Evidence printed before the one-line error (log lines, a failing step's output).
        self.details = details or []
        # What the failure left behind (a container it could not remove), each a line naming
        # it and the command that removes it, for a report to list.
        self.left: list[str] = []

    def add_clause(self, clause: str) -> None:
        """Say `clause` too, after "; " on the one line, once."""
        if clause not in self.message:
            self.message = f"{self.message}; {clause}"
            self.args = (self.message,)


class UsageError(OpsctlError):
    """Bad command-line usage: unknown variant, conflicting options, bad argument."""

    exit_code = EXIT_USAGE


class ProfileError(OpsctlError):
    """A deployment profile that does not load or validate (YAML, schema, sglang flags)."""

    exit_code = EXIT_USAGE


class PatchError(OpsctlError):
    """A patch set that does not apply cleanly to the sglang source it was pinned to."""

    exit_code = EXIT_BUILD


class BuildError(OpsctlError):
    """An image build or its post-build verification failed."""

    exit_code = EXIT_BUILD


class LaunchError(OpsctlError):
    """The server could not be started or did not become ready."""

    exit_code = EXIT_LAUNCH


class ContainerGone(LaunchError):
    """The engine has no such container (any more): removed meanwhile, e.g. by the daemon
    finishing a removal a Ctrl-C cut short."""


class ServerUnreachable(LaunchError):
    """Nothing answers at the URL (connection refused, DNS, TLS): exit 4, like a failed launch."""


class SmokeError(OpsctlError):
    """A post-deploy check or an SLO failed."""

    exit_code = EXIT_SMOKE


class DaemonUnreachable(OpsctlError):
    """The Docker engine did not answer."""

    exit_code = EXIT_DAEMON


class HostNotReady(OpsctlError):
    """`opsctl doctor` found a check of the host that failed."""

    exit_code = EXIT_HOST


class Interrupted(OpsctlError):
    """Ctrl-C (or SIGTERM, SIGHUP) stopped a run after its partial results were saved; its exit
    code is the interrupting signal's."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, hint: str = "", details: list[str] | None = None) -> None:
        super().__init__(message, hint, details)
        self.exit_code = exit_code()


class Crashed(OpsctlError):
    """A bug stopped a run after its partial results were saved; `details` holds the traceback."""

    exit_code = EXIT_BUG


def stop_reason(stopped_by: BaseException) -> str:
    """One line for a report's `partial_reason`: what stopped the run early."""
    if isinstance(stopped_by, KeyboardInterrupt):
        return f"interrupted ({interrupted_by()})"
    return " ".join(f"crashed: {type(stopped_by).__name__}: {stopped_by}".split())


def stop_error(stopped_by: BaseException, what: str, where: object) -> OpsctlError:
    """The error to raise once a run's partial report is written: exit 130 for Ctrl-C (143
    SIGTERM, 129 SIGHUP), else 1 with the traceback (it is a bug) above the one-line message."""
    saved = f"what it measured is in {where} (marked partial)"
    if isinstance(stopped_by, KeyboardInterrupt):
        return Interrupted(f"{what} interrupted ({interrupted_by()}); {saved}",
                           hint="run it again for a whole report")
    return Crashed(f"{what} {stop_reason(stopped_by)}; {saved}",
                   hint="this is a bug in opsctl: please report it with the traceback above",
                   details="".join(traceback.format_exception(stopped_by)).splitlines())
