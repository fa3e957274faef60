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

Never silent: the wait reports at least every REPORT_EVERY_SECONDS (a long poll interval is slept
in ticks, each followed by a report), and `startup_phase` reads which start-up phase the server's
own log announces (weights loading, CUDA graphs capturing, warming up), so a piped `up` prints a
line per phase and a "still ..." line when a phase lasts.
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


# Never more than this between two reports of a wait (the heartbeat of `up`'s progress lines).
REPORT_EVERY_SECONDS = 30.0
# The longest sleep between two reports: a long poll interval is slept in ticks of this.
TICK_SECONDS = 5.0
# A lasting phase is reported again after this much silence: a report can come a tick and a whole
# probe later, and the next line must still come within REPORT_EVERY_SECONDS.
HEARTBEAT_SECONDS = REPORT_EVERY_SECONDS - TICK_SECONDS - PROBE_TIMEOUT_SECONDS

# sglang's start-up phases, each as the line its log opens it with, matched anywhere in a line
# (a rank prefix such as "TP0" may precede it). Read in the pinned releases' wheels (paths under
# sglang/srt/) and seen in a real 0.5.15 server's log (bench/results/sglang_h200/server-glm5.log,
# lines 22, 27, 29, 31, 35, 42 and 52); the simulator (opsctl/sim/server.py) prints the same.
STARTUP_PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    # 0.5.23 model_executor/model_runner.py:1274; 0.5.9 model_executor/model_runner.py:899
    (re.compile(r"Load weight begin\."), "loading weights"),
    # 0.5.23 model_executor/model_runner.py:1373 and
    # model_executor/model_runner_components/startup_weight_load.py:538;
    # 0.5.9 model_executor/model_runner.py:1041
    (re.compile(r"Load weight end\."), "weights loaded, allocating the KV cache"),
    # 0.5.23 mem_cache/kv_cache_configurator.py:499;
    # 0.5.9 model_executor/model_runner_kv_cache_mixin.py:745
    (re.compile(r"Memory pool end\."), "KV cache allocated"),
    # 0.5.23 model_executor/model_runner_components/cuda_graph_setup.py:685 and :759 ("Capture
    # target decode CUDA graph begin."), speculative/eagle_worker_v2.py:515 (draft);
    # 0.5.9 model_executor/model_runner.py:2147 ("Capture cuda graph begin.")
    (re.compile(r"Capture .*graph begin", re.IGNORECASE), "capturing CUDA graphs"),
    # 0.5.23 cuda_graph_setup.py:696 and :788; 0.5.9 model_runner.py:2161
    (re.compile(r"Capture .*graph end", re.IGNORECASE), "CUDA graphs captured"),
    # uvicorn's own start line as sglang's logging prints it (server-glm5.log:42); 0.5.23 logs
    # the same words itself with SO_REUSEPORT workers (entrypoints/http_server.py:3072)
    (re.compile(r"Uvicorn running on"), "listening, warming up"),
    # 0.5.23 entrypoints/http_server.py:2600; 0.5.9 entrypoints/http_server.py:1836
    (re.compile(r"The server is fired up and ready to roll!"), "warmed up"),
)


def startup_phase(log: str) -> str | None:
    """The start-up phase the log's last phase line announces (STARTUP_PHASES), None when the
    log holds none."""
    for line in reversed(log_lines(log)):
        for pattern, phase in STARTUP_PHASES:
            if pattern.search(line):
                return phase
    return None


def log_lines(log: str) -> list[str]:
    """The log's non-blank lines; a progress bar's carriage returns end a line too (tqdm's)."""
    return [line for line in re.split(r"[\r\n]", log) if line.strip()]


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

    `on_progress` is called after each probe and, while a poll interval longer than TICK_SECONDS
    is slept, after each tick with the last probe's state (so a caller can report within
    REPORT_EVERY_SECONDS whatever the interval).

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
        _sleep_in_ticks(clock, poll_seconds, started, state, on_progress)


def _sleep_in_ticks(clock: Clock, seconds: float, started: float, state: Probe,
                    on_progress: Callable[[Probe, float], None]) -> None:
    """Sleep `seconds` in pieces of at most TICK_SECONDS, reporting `state` between two."""
    while seconds > TICK_SECONDS:
        clock.sleep(TICK_SECONDS)
        seconds -= TICK_SECONDS
        on_progress(state, clock.monotonic() - started)
    clock.sleep(seconds)


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
