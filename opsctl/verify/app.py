"""`opsctl verify`: does the running server resolve what the profile's variant implies?

Reads /server_info and /model_info (bounded in size and time), compares every checked setting
with what the variant's argv and the pinned release's defaults imply (opsctl.verify.checks), and
reads the patch's start-up line from the container log when the caller has one. Agreement
between two variants proves nothing; agreement with the profile is what this checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from opsctl.config.profiles import Deployment, to_argv
from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.core.errors import LaunchError, ServerUnreachable, UsageError
from opsctl.core.files import open_regular
from opsctl.core.httpcap import answer_json
from opsctl.core.redact import API_KEY_ENV
from opsctl.verify import checks
from opsctl.verify.checks import FieldCheck
from opsctl.verify.facts import Value, facts_for

MAX_INFO_BYTES = 4 << 20  # a real /server_info is tens of KB
MAX_LOG_BYTES = 64 << 20  # the start-up lines come first; a long-serving log is cut after this
DEFAULT_TIMEOUT_S = 10.0


class VerifyMismatch(LaunchError):
    """The server resolved a setting differently from the profile (exit 4, as a bad launch)."""


@dataclass(frozen=True)
class VerifyResult:
    base_url: str
    profile: str
    variant: str
    sglang_version: str
    checks: list[FieldCheck]

    @property
    def mismatches(self) -> list[FieldCheck]:
        return [c for c in self.checks if c.status == "mismatch"]

    @property
    def unknown(self) -> list[FieldCheck]:
        return [c for c in self.checks if c.status == "unknown"]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "profile": self.profile, "variant": self.variant,
                "sglang_version": self.sglang_version, "ok": self.ok,
                "checks": [asdict(check) for check in self.checks]}


def fetch_json(client: httpx.Client, path: str, timeout_s: float, clock: Clock = SYSTEM_CLOCK,
               max_bytes: int = MAX_INFO_BYTES) -> dict[str, Any]:
    """GET a JSON object; LaunchError (exit 4) for anything but a bounded 200 JSON object."""
    deadline = clock.monotonic() + timeout_s
    try:
        with client.stream("GET", path, timeout=timeout_s) as response:
            if response.status_code in (401, 403):
                raise LaunchError(f"GET {path}: HTTP {response.status_code}",
                                  hint=f"the server wants an API key: set ${API_KEY_ENV}")
            if response.status_code != 200:
                raise LaunchError(f"GET {path}: HTTP {response.status_code}",
                                  hint="is this an sglang server? verify reads its info endpoints")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise LaunchError(f"GET {path}: the answer exceeds {max_bytes} bytes",
                                      hint="is this an sglang server?")
                if clock.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"no whole answer within {timeout_s:g}s")
    except httpx.ConnectError as exc:
        raise ServerUnreachable(
            f"no server answers at {client.base_url}: {exc}",
            hint="is it running? `opsctl status`, or check --base-url",
        ) from None
    except httpx.TimeoutException:
        raise LaunchError(
            f"GET {path} did not answer within {timeout_s:g}s",
            hint="the server is overloaded or still loading; retry when ready",
        ) from None
    except httpx.HTTPError as exc:
        raise LaunchError(
            f"GET {path} failed: {type(exc).__name__}: {exc}", hint="check --base-url"
        ) from None
    try:
        payload = answer_json(httpx.Response(200, content=bytes(body)))
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise LaunchError(f"GET {path}: not a JSON object", hint="is this an sglang server?")
    return payload


def read_log(path: Path, max_bytes: int = MAX_LOG_BYTES) -> str:
    """The head of a container log file (where the start-up lines are)."""
    try:
        with open_regular(path, "--log") as handle:  # a FIFO blocked `open` forever
            return handle.read(max_bytes).decode("utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read the log {path}: {exc.strerror}",
                         hint="pass a file saved from the container log") from None


def _checked_expect(known: Mapping[str, Any], expect: Mapping[str, Value] | None
                    ) -> Mapping[str, Value] | None:
    unknown = sorted(set(expect or {}) - set(known))
    if unknown:
        raise UsageError(f"expect names unknown field(s) {', '.join(unknown)}",
                         hint=f"fields verify checks: {', '.join(known)}")
    return expect


def resolution_of(deployment: Deployment) -> checks.Resolution | None:
    """The release's own resolution of the deployment's current argv, from its record."""
    from opsctl.config.resolve import current_record

    found = current_record(deployment)
    if found is None:
        return None
    record, path = found
    gpu = record["gpu"]
    return checks.Resolution(
        resolved=record["resolved"],
        source=f"sglang {record['sglang_version']}'s own resolution on {gpu['count']}x "
               f"{gpu['name']} sm_{gpu['compute_capability'].replace('.', '')} ({path})")


def run_verify(deployment: Deployment, client: httpx.Client, *, log_text: str | None = None,
               expect: Mapping[str, Value] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
               clock: Clock = SYSTEM_CLOCK) -> VerifyResult:
    """Every checked field: expected, resolved, ok/mismatch/unknown and where each came from."""
    profile = deployment.profile
    version = deployment.image.sglang_version
    facts = facts_for(version)
    if facts is None:
        raise UsageError(f"no release facts recorded for sglang {version}",
                         hint=f"a pinned release records them in patches/sglang/{version}/"
                              "defaults.json")
    # The kernel module, only to read its start-up line: loaded here, not for every command.
    from opsctl.kernels.kv_gather_cast import parse_marker

    argv = to_argv(deployment)[len(deployment.server.entrypoint):]
    expected = checks.expectations(facts, argv, deployment.model.architecture,
                                   _checked_expect(facts, expect), resolution_of(deployment))
    server_info = fetch_json(client, "/server_info", timeout_s, clock)
    model_info = fetch_json(client, "/model_info", timeout_s, clock)
    found = [checks.version_check(version, server_info),
             *checks.compare(facts, expected, server_info, model_info),
             checks.patch_check(deployment.patched, log_text, parse_marker)]
    return VerifyResult(base_url=str(client.base_url).rstrip("/"), profile=profile.name,
                        variant=deployment.variant, sglang_version=version, checks=found)


def raise_on_mismatch(result: VerifyResult) -> None:
    """One line naming every mismatching field; nothing when all checked fields agree."""
    if result.ok:
        return
    named = "; ".join(f"{c.field}: expected {c.expected}, resolved {c.resolved}"
                      for c in result.mismatches)
    raise VerifyMismatch(
        f"{result.base_url} does not run profile {result.profile!r} variant "
        f"{result.variant!r} as specified: {named}",
        hint="the server dropped or rewrote a flag, runs another sglang release, or the "
             "patch is not (or wrongly) active: compare its launch command and log with "
             "`opsctl profile show`",
    )
