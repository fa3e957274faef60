"""Is the server ready? The one probe and the one wait loop, for a container or a local process.

Readiness (DESIGN.md): connection refused and 503 mean "still loading" (an 8-GPU load takes many
minutes); a server that exits before ready is a failure whatever its exit code; ready means
`/health_generate` answers 200 and `/v1/models` lists the served model name. `/health_generate`
alone is not enough: it answers before a renamed model is listed, and a client that asks for the
served name then gets 404.

sglang's `--api-key` guards /v1/models but not /health*, so the probe sends the key
($OPSCTL_API_KEY): without it a key-protected server would look "warming" until the timeout.
A 401/403 from /v1/models even with the key is final (a wrong key does not heal by waiting).
Every answer is read under opsctl's byte cap and within the probe's timeout in total (connect,
headers and body: a server sending one header line a second cannot hold a probe longer).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from opsctl.core.answers import Malformed, decode_json, model_ids
from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.core.errors import LaunchError
from opsctl.core.httpcap import capped_client, read_capped
from opsctl.core.redact import API_KEY_ENV, api_key_from_env, auth_headers

# sglang's health generation waits ~1 s before answering; give it room (its own chart uses 10 s).
PROBE_TIMEOUT_SECONDS = 10.0

# Lines worth showing when a server dies while loading: what operators grep for first.
_RECOGNISABLE = re.compile(
    r"out of memory|OutOfMemoryError|CUDA error|NCCL|unrecognized arguments|error: argument|"
    r"ambiguous option|Traceback|Error:|RuntimeError|AssertionError|Killed",
    re.IGNORECASE,
)


class Phase(enum.StrEnum):
    LOADING = "loading"  # port closed: weights loading
    WARMING = "warming"  # 503: sglang's ServerStatus.Starting, warm-up, CUDA graph capture
    READY = "ready"


@dataclass(frozen=True)
class Probe:
    phase: Phase
    detail: str
    refused: bool = False  # the server refused the key: waiting longer cannot help


@dataclass(frozen=True)
class Exited:
    """A server that stopped: its exit code (None when the engine does not know) and log tail."""

    exit_code: int | None
    log: str


def http_client(api_key: str | None = None) -> httpx.Client:
    """The probe's client: the API key ($OPSCTL_API_KEY unless given), answers capped."""
    return capped_client(headers=auth_headers(api_key or api_key_from_env()),
                         timeout_s=PROBE_TIMEOUT_SECONDS)


def http_ok(client: httpx.Client, url: str, timeout_s: float = PROBE_TIMEOUT_SECONDS) -> Probe:
    """One GET: nothing listening is LOADING, any answer but 200 is WARMING, 200 is READY.

    Only the status is read; the body is never downloaded.
    """
    path = httpx.URL(url).path
    try:
        with client.stream("GET", url, timeout=timeout_s) as response:
            status = response.status_code
    except httpx.TimeoutException:
        return Probe(Phase.WARMING, f"{path} timed out")
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
        return Probe(Phase.LOADING, "port closed")
    except httpx.TransportError as exc:
        return Probe(Phase.LOADING, f"no answer ({type(exc).__name__})")
    except httpx.HTTPError as exc:  # an answer refused unread (an encoding opsctl did not ask for)
        return Probe(Phase.WARMING, f"{path}: {type(exc).__name__}")
    if status != 200:
        return Probe(Phase.WARMING, f"{path} answered {status}")
    return Probe(Phase.READY, f"{path} answered 200")


def probe(client: httpx.Client, url: str, served_name: str, clock: Clock = SYSTEM_CLOCK,
          timeout_s: float = PROBE_TIMEOUT_SECONDS) -> Probe:
    """One look at an sglang server at `url`: which phase is it in? Each of its two requests
    ends within `timeout_s` in total (the client's transport bounds the whole exchange)."""
    health = http_ok(client, f"{url}/health_generate", timeout_s)
    if health.phase is not Phase.READY:
        return health
    return _models_probe(client, f"{url}/v1/models", served_name, clock, timeout_s)


def probe_timeout(left_s: float) -> float:
    """A probe's timeout when `left_s` seconds of a readiness wait remain: never past the wait
    (a slow server cannot stretch `up --timeout 10` by a whole probe), never under a second."""
    return max(1.0, min(PROBE_TIMEOUT_SECONDS, left_s))


def _models_probe(client: httpx.Client, url: str, served_name: str, clock: Clock,
                  timeout_s: float) -> Probe:
    try:
        with client.stream("GET", url, timeout=timeout_s) as response:
            if response.status_code in (401, 403):
                return Probe(Phase.WARMING, f"/v1/models answered {response.status_code}: the "
                             f"server wants an API key (${API_KEY_ENV}) or refused it",
                             refused=True)
            if response.status_code != 200:
                return Probe(Phase.WARMING, f"/v1/models answered {response.status_code}")
            ids = model_ids(decode_json(read_capped(response, timeout_s=timeout_s, clock=clock)))
    except httpx.HTTPError as exc:
        return Probe(Phase.WARMING, f"/v1/models not answering yet ({type(exc).__name__}: {exc})")
    except Malformed as exc:
        return Probe(Phase.WARMING, f"/v1/models: {exc}")
    if served_name not in ids:
        return Probe(Phase.WARMING, f"/v1/models lists {ids[:5]}, not {served_name!r}")
    return Probe(Phase.READY, "healthy and serving " + served_name)


def wait_ready(
    check: Callable[[], Probe],
    *,
    exited: Callable[[], Exited | None],
    timeout_seconds: float,
    poll_seconds: float,
    clock: Clock,
    on_progress: Callable[[Probe, float], None] = lambda state, elapsed: None,
    cleanup: str = "container removed",
    timeout_hint: str = "raise --timeout or readiness.timeout_seconds; `opsctl logs` won't help "
    "now, rerun `up` and watch the log line",
) -> float:
    """Poll `check` until READY; returns the seconds it took.

    LaunchError when the server exits first (`exited` returns its state) or time runs out; the
    caller removes what it started, and `cleanup` ("container removed") says so in the message.
    A KeyboardInterrupt from `on_progress` or the clock's sleep propagates unchanged.
    """
    after = f"; {cleanup}" if cleanup else ""
    started = clock.monotonic()
    while True:
        elapsed = clock.monotonic() - started
        gone = exited()
        if gone is not None:
            raise _died_while_loading(gone, after)
        state = check()
        on_progress(state, elapsed)
        if state.phase is Phase.READY:
            return elapsed
        if state.refused:
            raise LaunchError(f"{state.detail}{after}",
                              hint=f"export {API_KEY_ENV}=<the key the server was started with>")
        if elapsed > timeout_seconds:
            raise LaunchError(
                f"not ready after {timeout_seconds:.0f} s (last phase: {state.phase}: "
                f"{state.detail}){after}",
                hint=timeout_hint,
            )
        clock.sleep(poll_seconds)


def _died_while_loading(gone: Exited, after: str) -> LaunchError:
    """The error for a server that stopped before it was ready, with the lines that say why."""
    lines = gone.log.splitlines()
    telling = [line for line in lines if _RECOGNISABLE.search(line)][-5:]
    tail = lines[-15:]
    first = (telling or tail or ["(no output)"])[-1].strip()[:200]
    return LaunchError(
        f"server exited before it was ready (exit code {gone.exit_code}): {first}{after}",
        hint="log lines that matter are printed above; fix the cause and run `opsctl up` again",
        details=[*telling, "--- log tail ---", *tail],
    )
