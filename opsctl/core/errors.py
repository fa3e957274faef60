"""The errors a user can cause, each with its documented exit code and a hint.

The CLI reports every OpsctlError in one place as two lines (the message, then the hint) and
exits with the error's code; anything else is a bug and exits 1 with a traceback.

Exit codes (README and `opsctl --help` repeat this table):
  0 ok · 1 unexpected bug · 2 bad usage or invalid profile · 3 build failed
  4 launch/readiness failed · 5 smoke or SLO failed · 6 Docker daemon unreachable
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USAGE = 2
EXIT_BUILD = 3
EXIT_LAUNCH = 4
EXIT_SMOKE = 5
EXIT_DAEMON = 6


class OpsctlError(Exception):
    """Base of every error a user can cause. `message` is one line; `hint` says what to do."""

    exit_code = EXIT_BUG

    def __init__(self, message: str, hint: str = "", details: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        # Evidence printed before the one-line error (log lines, a failing step's output).
        self.details = details or []


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


class SmokeError(OpsctlError):
    """A post-deploy check or an SLO failed."""

    exit_code = EXIT_SMOKE


class DaemonUnreachable(OpsctlError):
    """The Docker engine did not answer."""

    exit_code = EXIT_DAEMON
