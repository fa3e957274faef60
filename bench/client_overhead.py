"""Is opsctl's bench client the bottleneck? Measure it against the simulator's known ITL.

Starts the sglang simulator (python3 -m opsctl.sim) on loopback with a fixed inter-token latency
and no ITL growth with load, runs `opsctl bench`'s own sweep code at one concurrency level, and
compares the ITL the client measured with (a) the configured ITL and (b) the ITL the simulator
itself recorded in its `sglang:inter_token_latency_seconds` histogram over the same run.
The target: client-measured mean ITL within 2% of the configured value.

    .venv/bin/python bench/client_overhead.py            # writes bench/client_overhead.json

Client and simulator share this machine's cores, so the result bounds the client's overhead on
the machine it ran on; it is a benchmark, recorded here, not a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shlex
import sys
import time
from pathlib import Path

import httpx

from opsctl.deploy import localsim as simproc
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.sweep import sweep
from opsctl.traffic.settings import BenchSettings

ROOT = Path(__file__).resolve().parent.parent


_ITL_SAMPLE = re.compile(r"^sglang:inter_token_latency_seconds_(sum|count)(\{[^}]*\})? (\S+)$")


def _server_itl(url: str) -> tuple[float, float]:
    """(sum, count) of the simulator's own ITL histogram, summed over label sets."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    totals = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        match = _ITL_SAMPLE.match(line)
        if match:
            totals[match.group(1)] += float(match.group(3))
    return totals["sum"], totals["count"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--input-words", type=int, default=64)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "client_overhead.json"
    )
    args = parser.parse_args()

    sim_env = {"OPSCTL_SIM_ITL_MS": f"{args.itl_ms:g}", "OPSCTL_SIM_TTFT_MS": f"{args.ttft_ms:g}",
               "OPSCTL_SIM_ITL_SLOPE_MS": "0", "OPSCTL_SIM_FAULT": "none"}
    sim = simproc.start(["--model-path", "/models/GLM-5-NVFP4", "--served-model-name", "glm-5",
                         "--enable-metrics"], sim_env)
    url = sim.url
    try:
        options = BenchOptions(BenchSettings(concurrency=(args.concurrency,),
                                             requests_per_level=args.requests,
                                             input_words=args.input_words,
                                             output_tokens=args.output_tokens))
        before = _server_itl(url)
        variant = asyncio.run(sweep("sim", url, options))
        after = _server_itl(url)
    finally:
        sim.stop()

    # The server-side delta includes the warm-up requests; its mean is still the sim's own ITL.
    server_count = after[1] - before[1]
    server_mean_ms = (after[0] - before[0]) / server_count * 1000 if server_count else None
    level = variant.levels[0]
    client_mean_ms = level.itl_ms.mean
    configured = args.itl_ms
    error_pct = None if client_mean_ms is None else (client_mean_ms - configured) / configured * 100
    target_met = error_pct is not None and abs(error_pct) <= 2.0
    record: dict[str, object] = {
        "what": "opsctl bench client overhead: measured ITL vs the simulator's configured ITL",
        "command": "cd <checkout> && " + shlex.join([".venv/bin/python", "bench/client_overhead.py",
                                                    *sys.argv[1:]]),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "processor": platform.processor() or None,
                    "note": "client and simulator on the same machine, loopback HTTP"},
        "simulator": {"argv": sim.argv, "env": sim_env},
        "load": {"concurrency": args.concurrency, "requests": args.requests,
                 "output_tokens": args.output_tokens, "input_words": args.input_words},
        "result": {
            "configured_itl_ms": configured,
            "client_itl_mean_ms": client_mean_ms,
            "client_itl_p50_ms": level.itl_ms.p50,
            "client_itl_p90_ms": level.itl_ms.p90,
            "client_itl_p99_ms": level.itl_ms.p99,
            "server_recorded_itl_mean_ms": round(server_mean_ms, 4) if server_mean_ms else None,
            "client_mean_vs_configured_pct": round(error_pct, 3) if error_pct is not None else None,
            "target_pct": 2.0,
            "target_met": target_met,
            "completed": level.completed,
            "failed": level.failed + level.warmup_failed,
            "output_tokens_per_s": level.output_tokens_per_s,
            "client_cpu_s": level.client_cpu_s,
            "client_cpu_us_per_token": round(level.client_cpu_s / level.output_tokens * 1e6, 2)
            if level.client_cpu_s is not None and level.output_tokens else None,
        },
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record["result"], indent=2))
    return 0 if target_met else 1


if __name__ == "__main__":
    sys.exit(main())
