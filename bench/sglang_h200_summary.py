"""Summarise a device run's results directory (bench/run_sglang_gpu.sh's /tmp/res) into one JSON.

    python bench/sglang_h200_summary.py RES_DIR --out bench/results/sglang_h200_0515.json

Every figure is read from the files the run wrote (opsctl bench's bench.json, smoke's and
verify's reports, trace analyze's analysis.json, the server logs); nothing is typed in.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def summarise(res: Path) -> dict:
    out: dict = {
        "device_env": (res / "env.txt").read_text().splitlines()
        if (res / "env.txt").exists()
        else None
    }
    out["argv"] = {
        v: (res / f"argv-{v}.txt").read_text().strip()
        for v in ("baseline", "gathercast")
        if (res / f"argv-{v}.txt").exists()
    }
    out["patch_apply"] = (
        (res / "patch.txt").read_text().splitlines() if (res / "patch.txt").exists() else None
    )
    marker = res / "patch-marker-lines.txt"
    out["patch_marker_lines"] = marker.read_text().splitlines() if marker.exists() else []
    ready = {}
    for line in (res / "run.log").read_text().splitlines():
        m = re.search(r"(\w+) ready after (\d+)s", line)
        if m:
            ready[m.group(1)] = int(m.group(2))
    out["ready_after_s"] = ready
    bench = _read_json(res / "bench" / "bench.json")
    if bench:
        table = []
        for variant in bench["variants"]:
            for level in variant["levels"]:
                table.append(
                    {
                        "variant": variant["variant"],
                        "concurrency": level["concurrency"],
                        "requests": level["requests"],
                        "completed": level["completed"],
                        "failed": level["failed"],
                        "output_tokens_per_request": level["output_tokens"]
                        // max(level["completed"], 1),
                        "tpot_ms_p50": level["tpot_ms"]["p50"],
                        "tpot_ms_p99": level["tpot_ms"]["p99"],
                        "itl_ms_p50": level["itl_ms"]["p50"],
                        "ttft_ms_p50": level["ttft_ms"]["p50"],
                        "output_tokens_per_s": level["output_tokens_per_s"],
                        "requests_per_s": level["requests_per_s"],
                    }
                )
        out["bench"] = {
            "passed": bench.get("passed"),
            "config": bench.get("config"),
            "levels": table,
        }
        by = {(r["variant"], r["concurrency"]): r for r in table}
        out["gathercast_vs_baseline"] = [
            {
                "concurrency": c,
                "tpot_p50_ratio": round(
                    by[("gathercast", c)]["tpot_ms_p50"] / by[("baseline", c)]["tpot_ms_p50"], 4
                ),
                "throughput_ratio": round(
                    by[("gathercast", c)]["output_tokens_per_s"]
                    / by[("baseline", c)]["output_tokens_per_s"],
                    3,
                ),
            }
            for c in sorted({r["concurrency"] for r in table})
            if ("gathercast", c) in by and ("baseline", c) in by
        ]
    for kind in ("smoke", "verify"):
        for v in ("baseline", "gathercast"):
            rep = _read_json(res / f"{kind}-{v}.json")
            text = res / f"{kind}-{v}.txt"
            entry: dict = {"report": rep is not None}
            if rep:
                entry["passed"] = rep.get("passed", rep.get("ok"))
                checks = rep.get("checks")
                if isinstance(checks, list):
                    entry["checks"] = {
                        c.get("name"): {"status": c.get("status"), "detail": c.get("detail")}
                        for c in checks
                        if isinstance(c, dict)
                    }
            if text.exists():
                entry["output_tail"] = text.read_text().splitlines()[-4:]
            out[f"{kind}_{v}"] = entry
    for v in ("baseline", "gathercast"):
        analysis = _read_json(res / f"trace-{v}" / "analysis.json")
        if analysis:
            a = analysis["analyses"][0]
            out[f"trace_{v}"] = {
                k: a.get(k)
                for k in (
                    "device",
                    "steps",
                    "step_ms",
                    "gpu_busy_ms",
                    "idle_share",
                    "graph_launches",
                    "findings",
                )
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("res", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--command",
        default="bash .devcarry/overlay/bench/run_sglang_gpu.sh "
        "(device tool, kind nvidia-h200, carry .devcarry)",
    )
    args = parser.parse_args()
    summary = {
        "what": "a real sglang 0.5.15 server (baseline and gathercast) on one NVIDIA H200, "
        "opsctl run against it",
        "command": args.command,
        **summarise(args.res),
    }
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary.get("gathercast_vs_baseline"), indent=1))


if __name__ == "__main__":
    main()
