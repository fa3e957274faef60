"""The simulator as a local process on loopback, for benchmarks and demos that run the client
next to it. Deployments go through `opsctl up` and a container; this is the no-container path.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from opsctl.core.paths import project_root
from opsctl.deploy.profiles import Deployment, to_argv


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ok(url: str, timeout_s: float = 60.0) -> None:
    """Poll `url` until it answers 200; TimeoutError otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer 200 within {timeout_s:.0f} s")


@dataclass
class LocalSim:
    url: str
    argv: list[str]
    env: dict[str, str]
    process: subprocess.Popen[bytes]

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=timeout_s)


def start(flags: Sequence[str], env: Mapping[str, str], log: Path | None = None,
          ready_timeout_s: float = 120.0) -> LocalSim:
    """Start `python -m opsctl.sim FLAGS` on a free loopback port and wait until it serves."""
    port = free_port()
    # Like sglang's argparse, the simulator lets a later flag win: loopback and our port.
    argv = [sys.executable, "-m", "opsctl.sim", *flags, "--host", "127.0.0.1", "--port", str(port)]
    child_env = {**os.environ, **env, "PYTHONPATH": str(project_root())}
    with (log.open("wb") if log else open(os.devnull, "wb")) as out:
        process = subprocess.Popen(argv, env=child_env, cwd=project_root(), stdout=out,
                                   stderr=subprocess.STDOUT)
    sim = LocalSim(url=f"http://127.0.0.1:{port}", argv=argv[1:], env=dict(env), process=process)
    try:
        wait_ok(f"{sim.url}/health_generate", ready_timeout_s)
    except BaseException:
        sim.stop()
        raise
    return sim


def start_variant(deployment: Deployment, log: Path | None = None,
                  extra_env: Mapping[str, str] | None = None) -> LocalSim:
    """The simulator with exactly the flags and environment the variant's container gets."""
    flags = to_argv(deployment)[len(deployment.server.entrypoint):]
    return start(flags, {**deployment.env, **(extra_env or {})}, log)
