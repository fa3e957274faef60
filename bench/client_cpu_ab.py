"""opsctl bench's client CPU per streamed token, one checkout against another, side by side.

Issue 23 asks that the per-request records keep the client's CPU per token within 5% of what it
was before them. bench/client_compare.py measures opsctl against sglang's bench_serving; this
script measures opsctl against itself: the same simulator (opsctl.deploy.localsim, fixed TTFT
and ITL, no ITL growth with load) pinned to one core, `python -m opsctl bench` of each checkout
pinned to another (`taskset -c`), run after run alternating (before, after, before, ...) so
that drift of the machine falls on both. The figure is each level's own
`client_cpu_us_per_token` (the client's CPU over the measured phase only, the figure bench.json
reports), per rep, with the mean and the median of each side and their change.

    git archive c910417 | tar -x -C /tmp/cc-before      # the checkout before the records
    .venv/bin/python bench/client_cpu_ab.py --before /tmp/cc-before --after . \
        --out bench/results/client_cpu_ab_issue23.json

A benchmark, not a test: run it on a quiet machine with two free cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opsctl.deploy import localsim  # noqa: E402 - after the checkout is on the path

SIM_ENV = {"OPSCTL_SIM_ITL_MS": "5", "OPSCTL_SIM_TTFT_MS": "50", "OPSCTL_SIM_ITL_SLOPE_MS": "0"}
SIM_ARGS = [
    "--model-path",
    "/models/GLM-5-NVFP4",
    "--served-model-name",
    "glm-5",
    "--enable-metrics",
]


def _bench(checkout: Path, url: str, args: argparse.Namespace, cpu: str | None) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix="cpu-ab-")) / "bench"
    argv = [sys.executable, "-m", "opsctl", "bench", "--base-url", url, "--concurrency",
            args.concurrency, "--input-words", str(args.input_words), "--output-tokens",
            str(args.output_tokens), "--requests", str(args.requests), "--out", str(out)]
    if cpu is not None:
        argv = ["taskset", "-c", cpu, *argv]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=600,
                   check=True)
    data = json.loads((out / "bench.json").read_text())
    shutil.rmtree(out.parent, ignore_errors=True)
    return {str(level["concurrency"]): level["client_cpu_us_per_token"]
            for level in data["variants"][0]["levels"]}


def _summary(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    levels = sorted(runs["before"][0], key=int)
    table: dict[str, Any] = {}
    for level in levels:
        before = [rep[level] for rep in runs["before"]]
        after = [rep[level] for rep in runs["after"]]
        row: dict[str, Any] = {}
        for how, pick in (("mean", statistics.fmean), ("median", statistics.median)):
            b, a = pick(before), pick(after)
            row[how] = {"before": round(b, 2), "after": round(a, 2),
                        "change_pct": round(100 * (a - b) / b, 1)}
        row["spread_pct_before"] = round(
            100 * (max(before) - min(before)) / statistics.median(before), 1
        )
        table[level] = row
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--concurrency", default="16,64")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--input-words", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "client_cpu_ab.json")
    args = parser.parse_args()
    pinned = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
    if pinned:
        os.sched_setaffinity(0, {0})  # the simulator inherits core 0; each client gets core 1
    log = Path(tempfile.mkdtemp(prefix="cpu-ab-sim-")) / "sim.log"
    sim = localsim.start(SIM_ARGS, SIM_ENV, log, ready_timeout_s=60, wait="ready")
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    load_before = os.getloadavg()
    try:
        for rep in range(args.reps):
            for side in ("before", "after"):
                checkout = args.before if side == "before" else args.after
                runs[side].append(
                    _bench(checkout.resolve(), sim.url, args, "1" if pinned else None)
                )
                print(f"rep {rep + 1} {side}: {runs[side][-1]}", flush=True)
    finally:
        sim.stop(timeout_s=10)
    record = {
        "what": "opsctl bench's client CPU per streamed token (each level's "
        "client_cpu_us_per_token, measured phase only), two checkouts alternating on one simulator",
        "command": " ".join(["bench/client_cpu_ab.py", *sys.argv[1:]]),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "pinned": pinned,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "checkouts": {"before": str(args.before), "after": str(args.after)},
        "simulator": {"env": SIM_ENV, "args": SIM_ARGS},
        "workload": {
            "concurrency": args.concurrency,
            "requests_per_level": args.requests,
            "input_words": args.input_words,
            "output_tokens": args.output_tokens,
        },
        "runs": runs,
        "summary": _summary(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record["summary"], indent=2))


if __name__ == "__main__":
    main()
