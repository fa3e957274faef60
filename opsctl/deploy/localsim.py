"""The simulator as a local process on loopback: the one launcher for tests, benchmarks and demos
that run the client next to it. Deployments go through `opsctl up` and a container; this is the
no-container path, and it waits with the same readiness probe as `up`.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from opsctl.config.profiles import Deployment, to_argv
from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.core.httpcap import capped_client
from opsctl.core.paths import source_root
from opsctl.deploy import readiness
from opsctl.sim.config import SimArgs

# "ready": the readiness probe passes; "listen": the port accepts connections (warm-up 503s are
# still to come); "none": return at once (the load period is still to come).
Wait = Literal["ready", "listen", "none"]
POLL_SECONDS = 0.05
STOPPED = "process stopped"


_HANDED_OUT: set[int] = set()
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_SPREAD = 12000  # how many ports below the ephemeral range to draw from


def _below_ephemeral() -> tuple[int, int]:
    """Ports below the kernel's ephemeral range (its default starts at 32768)."""
    try:
        first = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 32768
    high = max(first - 1, 2048)
    return max(1024, high - _SPREAD), high


def free_port() -> int:
    """A loopback port that is free now, never the same one twice in a process, drawn below the
    ephemeral range: outgoing connections take their source ports from there, so a port the
    kernel hands out for bind(0) can be taken by a client before the server binds it (six Ctrl-C
    timings side by side hit "host port already taken")."""
    low, high = _below_ephemeral()
    draw = random.SystemRandom()
    for _ in range(256):
        port = draw.randint(low, high)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket() as sock:  # the low range is full: what the kernel gives
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalSim:
    url: str
    port: int
    argv: list[str]
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log_path: Path | None = None

    def logs(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def exited(self) -> readiness.Exited | None:
        code = self.process.poll()
        return None if code is None else readiness.Exited(exit_code=code, log=self.logs())

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, wait, SIGKILL as a last resort; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)
        return self.process.returncode


def start(
    flags: Sequence[str],
    env: Mapping[str, str],
    log: Path | None = None,
    ready_timeout_s: float = 120.0,
    wait: Wait = "ready",
    clock: Clock = SYSTEM_CLOCK,
) -> LocalSim:
    """Start `python -m opsctl.sim FLAGS` on a free loopback port and wait as `wait` says.

    LaunchError (and the process stopped) when it exits or is not there in time.
    """
    port = free_port()
    # Like sglang's argparse, the simulator lets a later flag win: loopback and our port.
    argv = [sys.executable, "-m", "opsctl.sim", *flags, "--host", "127.0.0.1", "--port", str(port)]
    python_path = os.pathsep.join(
        p for p in (str(source_root()), os.environ.get("PYTHONPATH")) if p
    )
    child_env = {**os.environ, **env, "PYTHONPATH": python_path}
    with (log.open("wb") if log else open(os.devnull, "wb")) as out:
        process = subprocess.Popen(argv, env=child_env, cwd=source_root(), stdout=out,
                                   stderr=subprocess.STDOUT)
    sim = LocalSim(url=f"http://127.0.0.1:{port}", port=port, argv=argv[1:], env=dict(env),
                   process=process, log_path=log)
    try:
        if wait != "none":
            _wait(sim, flags, wait, ready_timeout_s, clock)
    except BaseException:
        sim.stop()
        raise
    return sim


def _wait(sim: LocalSim, flags: Sequence[str], wait: Wait, timeout_s: float, clock: Clock) -> None:
    hint = f"the simulator's log: {sim.log_path}" if sim.log_path else "start it with a log file"

    def until(probe: Callable[[], readiness.Probe]) -> None:
        readiness.wait_ready(probe, exited=sim.exited, timeout_seconds=timeout_s,
                             poll_seconds=POLL_SECONDS, clock=clock, cleanup=STOPPED,
                             timeout_hint=hint)

    if wait == "listen":
        until(lambda: _listening(sim.port))
        return
    # The simulator's own reading of the flags: which name it serves, which key it wants.
    args = SimArgs.parse(flags)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    with capped_client(headers=headers, timeout_s=readiness.PROBE_TIMEOUT_SECONDS) as client:
        until(lambda: readiness.probe(client, sim.url, args.served_model_name))


def _listening(port: int) -> readiness.Probe:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return readiness.Probe(readiness.Phase.READY, "listening")
    except OSError:
        return readiness.Probe(readiness.Phase.LOADING, "port closed")


def wait_ok(url: str, timeout_s: float = 60.0, clock: Clock = SYSTEM_CLOCK) -> None:
    """Wait until a local helper service (Prometheus, Pushgateway) answers 200 at `url`."""
    with capped_client(timeout_s=readiness.PROBE_TIMEOUT_SECONDS) as client:
        readiness.wait_ready(lambda: readiness.http_ok(client, url), exited=lambda: None,
                             timeout_seconds=timeout_s, poll_seconds=0.2, clock=clock,
                             cleanup="", timeout_hint=f"is {url} the right address?")


def start_variant(deployment: Deployment, log: Path | None = None,
                  extra_env: Mapping[str, str] | None = None) -> LocalSim:
    """The simulator with exactly the flags and environment the variant's container gets."""
    flags = to_argv(deployment)[len(deployment.server.entrypoint):]
    return start(flags, {**deployment.env, **(extra_env or {})}, log)
