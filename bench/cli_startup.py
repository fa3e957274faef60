"""How long `opsctl --help` and `opsctl status` take to start, against a bare interpreter, and
which heavy modules each imports: this checkout, and optionally an older tree side by side.

Each round runs every command of every tree once, in turn (so a busy machine slows both sides
alike); the figures are the median and the spread over the rounds. `status` runs against
whatever Docker engine this host has (no server is needed: it lists none). The imports are read
from one `python -X importtime` run per command. A benchmark, recorded here, not a test
(tests/unit/test_cli_imports.py asserts the imports themselves).

    .venv/bin/python bench/cli_startup.py [--before DIR] [--rounds N]
    # DIR: an older checkout's root, e.g. `git archive <commit> | tar -x -C DIR` (each command
    # runs in its tree's root: `python -m` finds the package there before PYTHONPATH)
    # writes bench/results/cli_startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "cli_startup.json"
COMMANDS = {"python -c pass": ["-c", "pass"], "opsctl --help": ["-m", "opsctl", "--help"],
            "opsctl status": ["-m", "opsctl", "status"]}
HEAVY = ("aiohttp", "httpx", "docker", "opsctl.kernels", "triton", "torch")
_IMPORT = re.compile(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)")


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "100"}


def _seconds(tree: Path, args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], env=_env(tree), cwd=tree, capture_output=True,
                   check=False, timeout=120)
    return time.perf_counter() - started


def _imports(tree: Path, args: list[str]) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-X", "importtime", *args], env=_env(tree), cwd=tree,
                          capture_output=True, text=True, check=False, timeout=120)
    names = [m.group(1) for line in done.stderr.splitlines() if (m := _IMPORT.match(line))]
    heavy = [h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names)]
    return {"modules": len(names), "heavy": heavy}


def _head() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=False)
    return f"{done.stdout.strip()} (this checkout, with its uncommitted changes)"


def _summary(times: list[float], bare: list[float]) -> dict[str, float]:
    median = statistics.median(times)
    return {"median_s": round(median, 4), "min_s": round(min(times), 4),
            "stdev_s": round(statistics.stdev(times), 4) if len(times) > 1 else 0.0,
            "x_bare_python": round(median / statistics.median(bare), 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, help="an older checkout's root, timed beside")
    parser.add_argument("--before-commit", help="the commit DIR was made from, for the record")
    parser.add_argument("--rounds", type=int, default=20)
    options = parser.parse_args()
    trees = {"after": ROOT, **({"before": options.before.resolve()} if options.before else {})}
    times: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c in COMMANDS}
    for tree, command in times:  # one warm-up each: the page cache, .pyc files
        _seconds(trees[tree], COMMANDS[command])
    for _ in range(options.rounds):
        for (tree, command), found in times.items():
            found.append(_seconds(trees[tree], COMMANDS[command]))
    results = {tree: {command: {**_summary(times[tree, command], times[tree, "python -c pass"]),
                                **_imports(path, COMMANDS[command])}
                      for command in COMMANDS}
               for tree, path in trees.items()}
    record = {
        "what": "wall time of each command (median over rounds, all commands of all trees "
                "interleaved), x_bare_python: median / `python -c pass`'s median in the same "
                "rounds; heavy: which of the HTTP stacks, Docker client and kernel modules it "
                "imports",
        "command": shlex.join([".venv/bin/python", *sys.argv]),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)},
        "trees": {"after": _head(), "before": options.before_commit or str(options.before)},
        "rounds": options.rounds,
        "results": results,
    }
    OUT.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
