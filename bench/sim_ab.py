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
import subprocess
import sys
from pathlib import Path

from opsctl.config.profiles import load_profile
from opsctl.deploy import localsim as simproc

ROOT = Path(__file__).resolve().parent.parent


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
    sims: dict[str, simproc.LocalSim] = {}
    try:
        for variant in args.variants.split(","):
            sims[variant] = simproc.start_variant(profile.resolve(variant))
        targets = [arg for name, sim in sims.items() for arg in ("--base-url", f"{name}={sim.url}")]
        command = [sys.executable, "-m", "opsctl", "bench", "--profile", "sim", *targets,
                   "--output-tokens", args.output_tokens, "--input-words", args.input_words,
                   "--out", str(args.out)]
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "COLUMNS": "120"})
    finally:
        for sim in sims.values():
            sim.stop()
    started = {name: {"env": sim.env, "argv": sim.argv} for name, sim in sims.items()}
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
