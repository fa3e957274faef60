"""The README's bench report: `opsctl bench` over two simulated variants of deploy/sim.yaml.

Starts one simulator per variant with exactly the argv and environment the `sim` profile
renders for its container (`profiles.to_argv`, the variant's env overlay), on loopback ports,
then runs the real command line against them:

    opsctl bench --base-url baseline=URL --base-url gathercast=URL --out docs/bench-sim ...

    .venv/bin/python bench/sim_ab.py                 # writes docs/bench-sim/

The latencies are the profile's simulated values, not measurements of any GPU: the report shows
that bench recovers what the simulator was configured to do and how it presents an A/B.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from opsctl.profiles import load_profile, to_argv

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health_generate", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"simulator at {url} not ready after {timeout_s}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="baseline,gathercast")
    parser.add_argument("--out", type=Path, default=Path("docs/bench-sim"),
                        help="relative to the checkout")
    parser.add_argument("--output-tokens", default="64")
    parser.add_argument("--input-words", default="256")
    args = parser.parse_args()

    # A SIGTERM must still stop the simulators this script started (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    profile = load_profile("sim")
    sims: list[subprocess.Popen[bytes]] = []
    targets: list[str] = []
    started: dict[str, dict[str, object]] = {}
    try:
        for variant in args.variants.split(","):
            deployment = profile.resolve(variant)
            port = _free_port()
            entry = len(deployment.server.entrypoint)
            # The container's argv, with python3 -> this interpreter and a loopback port
            # (the simulator, like argparse, lets a later flag win).
            argv = [sys.executable, *to_argv(deployment)[1:entry], *to_argv(deployment)[entry:],
                    "--host", "127.0.0.1", "--port", str(port)]
            env = {**os.environ, **deployment.env, "PYTHONPATH": str(ROOT)}
            sims.append(subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL))
            url = f"http://127.0.0.1:{port}"
            started[variant] = {"env": deployment.env, "argv": argv[1:]}
            targets += ["--base-url", f"{variant}={url}"]
        for target in targets[1::2]:
            _wait_ready(target.split("=", 1)[1])
        command = [sys.executable, "-m", "opsctl", "bench", "--profile", "sim", *targets,
                   "--output-tokens", args.output_tokens, "--input-words", args.input_words,
                   "--out", str(args.out)]
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "COLUMNS": "120"})
    finally:
        for sim in sims:
            sim.terminate()
        for sim in sims:
            sim.wait(timeout=30)
    (ROOT / args.out / "simulators.json").write_text(json.dumps({
        "what": "the simulators bench/sim_ab.py started (deploy/sim.yaml variants)",
        "rerun": "cd <checkout> && " + shlex.join([".venv/bin/python", "bench/sim_ab.py",
                                                  *sys.argv[1:]]),
        "bench_command": shlex.join(["opsctl", *command[3:]]),
        "simulators": started,
    }, indent=2) + "\n")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
