"""Side by side: opsctl's bench client against sglang 0.5.9's `python -m sglang.bench_serving`.

Both clients drive the same simulator (opsctl.sim through opsctl.deploy.localsim, fixed TTFT and
ITL, no ITL growth with load) with the same workload: token-exact random prompts of --input-len
tokens from one local tokenizer, --output-len-token answers (ignore_eos), a closed loop of N
requests per concurrency over streaming /v1/completions. The simulator runs on one core (this
script pins itself there and the simulator inherits it), each client on another (`taskset -c`);
the two clients alternate run by run (opsctl, peer, opsctl, peer) so that drift of the machine
falls on both.

Per run it records:
  - client CPU per streamed token, two ways: gross, the user + system time of the whole client
    run (RUSAGE_CHILDREN around it: start-up, warm-up, reports and the worker processes it waits
    for included) over the tokens the simulator streamed to it (the count deltas of its TTFT and
    ITL histograms, which it observes per token sent); and steady, sampled every 0.2 s from
    /proc (the client's process tree, live workers included) against that token count, the
    slope over the middle of the run (10% to 90% of its tokens): start-up and teardown left out;
    with the steady CPU as a share of one core (client-bound from 0.9);
  - ITL: the client's mean and p50 against the server's own (the delta of the simulator's
    sglang:inter_token_latency_seconds over the run: the mean is exact, the p50 a bucket estimate);
  - TTFT: the client's mean against the server's own (sglang:time_to_first_token_seconds);
  - completed and failed requests.
The server-side deltas include each client's warm-up requests (opsctl: one per concurrency slot;
bench_serving: one of at most 32 tokens); a server mean ITL above the configured one means the
simulator, not the client, fell behind on its core (flagged `sim-bound`).

The peer's workload is 0.5.9's `--dataset-name random-ids` (random token ids, as opsctl's
`random`): 0.5.9's `random` cuts ShareGPT texts and fetches ShareGPT from the hub without a
--dataset-path. The tokenizer is tests/tinymodel.py's, built by the peer's transformers 4.57.1
(it cannot read a tokenizer_config.json written by transformers 5; opsctl reads tokenizer.json).

    scripts/peer-bench-env.sh                         # once: .venv-peer with sglang 0.5.9
    .venv/bin/python bench/client_compare.py          # writes bench/results/client_compare.json
    .venv/bin/python bench/client_compare.py --quick  # a smoke of the harness, into out/

A benchmark, not a test: run the full one on a quiet machine with two free cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from opsctl.deploy import localsim
from opsctl.traffic.promtext import Parsed, bucket_quantile, delta, histograms, parse_selected

ROOT = Path(__file__).resolve().parent.parent
SERVED = "glm-5"
ITL = "sglang:inter_token_latency_seconds"
TTFT = "sglang:time_to_first_token_seconds"
SERIES = [f"{base}_{part}" for base in (ITL, TTFT) for part in ("bucket", "sum", "count")]
# Tokens streamed so far: the simulator observes each token as it sends it, the first into TTFT
# and every later one into ITL (its generation_tokens_total moves only when a request ends).
STREAMED = (f"{ITL}_count", f"{TTFT}_count")
SIM_BOUND_PCT = 2.0  # server mean ITL this far above the configured one: the simulator fell behind
CLIENT_BOUND_SHARE = 0.9  # of the client's one core
SAMPLE_PERIOD_S = 0.2
STEADY = (0.1, 0.9)  # the share of a run's tokens between which its steady CPU is measured
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--itl-ms", default="5,20", help="comma-separated simulator ITLs")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", default="1,16,32,64,128")
    parser.add_argument("--c512-at-5ms", action="store_true",
                        help="add concurrency 512 at ITL 5 ms (only where one core drives it)")
    parser.add_argument(
        "--rounds", type=int, default=4, help="requests per run: rounds x concurrency"
    )
    parser.add_argument("--min-requests", type=int, default=16)
    parser.add_argument("--reps", type=int, default=2, help="runs per client per cell, alternating")
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sim-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument("--peer-venv", type=Path, default=ROOT / ".venv-peer")
    parser.add_argument("--out", type=Path, default=None,
                        help="default bench/results/client_compare.json "
                             "(--quick: out/client_compare_quick.json)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke of the harness: ITL 20 ms, concurrency 1 and 8, 2 rounds, 1 rep",
    )
    args = parser.parse_args()
    if args.quick:
        args.itl_ms, args.concurrency, args.rounds, args.min_requests, args.reps = (
            "20",
            "1,8",
            2,
            4,
            1,
        )
    args.out = args.out or (ROOT / "out" / "client_compare_quick.json" if args.quick
                            else ROOT / "bench" / "results" / "client_compare.json")
    return args


class Harness:
    """One simulator at a time; runs each client pinned to the client core and measures it."""

    def __init__(self, args: argparse.Namespace, work: Path, tokenizer: Path) -> None:
        self.args, self.work, self.tokenizer = args, work, tokenizer
        self.peer_python = args.peer_venv / "bin" / "python"
        self.env = {key: value for key, value in os.environ.items()
                    if key not in ("OPSCTL_PUSHGATEWAY", "OPSCTL_API_KEY")}
        self.env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                        HF_HOME=str(work / "hf-home"))
        self.url, self.itl_ms, self.sim_pid = "", 0.0, 0  # the simulator being driven
        self.runs = 0

    def opsctl_argv(self, concurrency: int, requests: int, output_len: int, out: Path) -> list[str]:
        return [sys.executable, "-m", "opsctl", "bench", "--base-url", f"sim={self.url}",
                "--concurrency", str(concurrency), "--requests", str(requests),
                "--input-words", str(self.args.input_len), "--output-tokens", str(output_len),
                "--dataset-name", "random", "--tokenizer", str(self.tokenizer),
                "--seed", str(self.args.seed), "--out", str(out)]

    def peer_argv(self, concurrency: int, requests: int, output_len: int, out: Path) -> list[str]:
        return [
            str(self.peer_python),
            "-m",
            "sglang.bench_serving",
            "--backend",
            "sglang-oai",
            "--base-url",
            self.url,
            "--model",
            str(self.tokenizer),
            "--served-model-name",
            SERVED,
            "--tokenizer",
            str(self.tokenizer),
            "--dataset-name",
            "random-ids",
            "--random-input-len",
            str(self.args.input_len),
            "--random-output-len",
            str(output_len),
            "--random-range-ratio",
            "1",
            "--num-prompts",
            str(requests),
            "--max-concurrency",
            str(concurrency),
            "--request-rate",
            "inf",
            "--seed",
            str(self.args.seed),
            "--output-file",
            str(out),
        ]

    def run(self, client: str, concurrency: int, requests: int, output_len: int) -> dict[str, Any]:
        """One client run: its own figures, its CPU, and the server's view of the same span."""
        self.runs += 1
        stem = self.work / f"run{self.runs:03d}-{client}-c{concurrency}"
        out = stem.with_suffix(".jsonl") if client == "peer" else stem
        argv = (self.peer_argv if client == "peer" else self.opsctl_argv)(
            concurrency, requests, output_len, out)
        before = scrape(self.url)
        usage0, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        with stem.with_suffix(".log").open("wb") as log:
            process = subprocess.Popen(["taskset", "-c", str(self.args.client_core), *argv],
                                       env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
            sampler = Sampler(process.pid, self.sim_pid, self.url)
            sampler.start()
            try:
                code = process.wait(timeout=self.timeout(concurrency, requests))
            finally:
                sampler.halt()
                if process.poll() is None:
                    process.kill()
                    process.wait()
        wall = time.perf_counter() - started
        usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
        figures = (peer_figures(out, requests) if client == "peer" else opsctl_figures(out))
        if figures is None:  # recorded, and the sweep goes on
            figures = {"completed": 0, "failed": requests, "duration_s": None, "itl_mean_ms": None,
                       "itl_p50_ms": None, "ttft_mean_ms": None,
                       "error": stem.with_suffix(".log").read_text(errors="replace")[-2000:]}
        return {"client": client, "concurrency": concurrency, "requests": requests,
                "exit_code": code, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                "steady": sampler.steady(), "argv": argv, **figures,
                "server": server_view(before, scrape(self.url))}

    def timeout(self, concurrency: int, requests: int) -> float:
        per_request = (self.args.ttft_ms + self.args.output_len * max(self.itl_ms, 1.0)) / 1000
        return 120.0 + 5 * per_request * -(-requests // concurrency)


class Sampler(threading.Thread):
    """(time, CPU seconds of the client's process tree and of the simulator's, tokens streamed so
    far), every SAMPLE_PERIOD_S while the client runs. It runs on the simulator's core and costs
    it about 2 ms a sample (a /proc scan and a /metrics scrape), about 1% of that core."""

    def __init__(self, pid: int, sim_pid: int, url: str) -> None:
        super().__init__(daemon=True)
        self.pid, self.sim_pid, self.url = pid, sim_pid, url
        self.samples: list[tuple[float, float, float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_PERIOD_S):
            cpu = process_cpu_s()
            if self.pid in cpu and self.sim_pid in cpu:
                self.samples.append(
                    (
                        time.perf_counter(),
                        tree_cpu_s(cpu, self.pid),
                        tree_cpu_s(cpu, self.sim_pid),
                        streamed(scrape(self.url, STREAMED)),
                    )
                )

    def halt(self) -> None:
        self.done.set()
        self.join()

    def steady(self) -> dict[str, Any] | None:
        """CPU per token and share of a core over the middle of the run; None when too short."""
        if len(self.samples) < 2:
            return None
        first, last = self.samples[0][3], self.samples[-1][3]
        low, high = (first + (last - first) * share for share in STEADY)
        window = [s for s in self.samples if low <= s[3] <= high]
        if len(window) < 2 or window[-1][3] <= window[0][3]:
            return None
        (t0, cpu0, sim0, tok0), (t1, cpu1, sim1, tok1) = window[0], window[-1]
        return {"cpu_us_per_token": round((cpu1 - cpu0) / (tok1 - tok0) * 1e6, 1),
                "core_share": round((cpu1 - cpu0) / (t1 - t0), 3),
                "sim_core_share": round((sim1 - sim0) / (t1 - t0), 3),
                "tokens_per_s": round((tok1 - tok0) / (t1 - t0)), "tokens": int(tok1 - tok0),
                "seconds": round(t1 - t0, 2), "samples": len(window)}


def process_cpu_s() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user + system seconds with its reaped children), from /proc."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # from field 3 (state) on
        stats[int(entry)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / CLOCK_TICKS)
    return stats


def tree_cpu_s(stats: dict[int, tuple[int, float]], root: int) -> float:
    """CPU seconds of `root` and its live descendants."""
    total, frontier = 0.0, [root]
    while frontier:
        pid = frontier.pop()
        total += stats[pid][1]
        frontier.extend(child for child, (parent, _) in stats.items() if parent == pid)
    return total


def scrape(url: str, names: Sequence[str] = SERIES) -> Parsed:
    return parse_selected(httpx.get(f"{url}/metrics", timeout=30).text, names)


def streamed(parsed: Parsed) -> float:
    return sum(value for name in STREAMED for value in parsed.get(name, {}).values())


def server_view(before: Parsed, after: Parsed) -> dict[str, Any]:
    itl = delta(histograms(before, ITL), histograms(after, ITL))
    ttft = delta(histograms(before, TTFT), histograms(after, TTFT))
    p50, _ = bucket_quantile(0.5, itl)
    return {"tokens": int(streamed(after) - streamed(before)),
            "itl_mean_ms": ms(itl.sum / itl.count) if itl.count else None,
            "itl_p50_ms_bucket_estimate": ms(p50) if p50 is not None else None,
            "ttft_mean_ms": ms(ttft.sum / ttft.count) if ttft.count else None,
            "requests": int(ttft.count)}


def ms(seconds: float) -> float:
    return round(seconds * 1000, 4)


def opsctl_figures(out: Path) -> dict[str, Any] | None:
    path = out / "bench.json"
    if not path.exists():
        return None
    levels = json.loads(path.read_text())["variants"][0]["levels"]
    if not levels:
        return None
    level = levels[0]
    return {"completed": level["completed"], "failed": level["failed"] + level["warmup_failed"],
            "duration_s": level["duration_s"], "itl_mean_ms": level["itl_ms"]["mean"],
            "itl_p50_ms": level["itl_ms"]["p50"], "ttft_mean_ms": level["ttft_ms"]["mean"],
            "self_reported": {"client_cpu_share": level.get("client_cpu_share"),
                              "client_bound": level.get("client_bound"),
                              "itl_note": level.get("itl_note")}}


def peer_figures(out: Path, requests: int) -> dict[str, Any] | None:
    if not out.exists() or not out.read_text().strip():
        return None
    row = json.loads(out.read_text().strip().splitlines()[-1])
    return {"completed": row["completed"], "failed": requests - row["completed"],
            "duration_s": row["duration"], "itl_mean_ms": row["mean_itl_ms"],
            "itl_p50_ms": row["median_itl_ms"], "ttft_mean_ms": row["mean_ttft_ms"]}


def derive(run: dict[str, Any], configured_itl_ms: float) -> None:
    """Per-token CPU, the client's errors against the server, and the flags, added in place."""
    server, tokens, steady = run["server"], run["server"]["tokens"], run["steady"]
    run["cpu_us_per_token"] = round(run["cpu_s"] / tokens * 1e6, 1) if tokens else None
    run["cpu_us_per_token_steady"] = steady["cpu_us_per_token"] if steady else None
    run["core_share"] = steady["core_share"] if steady else None
    if run["itl_mean_ms"] is not None and server["itl_mean_ms"]:
        run["itl_mean_err_pct"] = round((run["itl_mean_ms"] / server["itl_mean_ms"] - 1) * 100, 2)
    if run["ttft_mean_ms"] is not None and server["ttft_mean_ms"] is not None:
        run["ttft_minus_server_ms"] = round(run["ttft_mean_ms"] - server["ttft_mean_ms"], 2)
    flags = []
    sim_share = steady["sim_core_share"] if steady else None
    if (
        server["itl_mean_ms"]
        and server["itl_mean_ms"] > configured_itl_ms * (1 + SIM_BOUND_PCT / 100)
        or sim_share is not None
        and sim_share >= CLIENT_BOUND_SHARE
    ):
        flags.append("sim-bound")
    if run["core_share"] is not None and run["core_share"] >= CLIENT_BOUND_SHARE:
        flags.append("client-bound")
    if run["failed"] or run["exit_code"]:
        flags.append(f"exit {run['exit_code']}" + (", no result" if "error" in run else ""))
    run["flags"] = flags


def build_tokenizer(args: argparse.Namespace, work: Path) -> Path:
    """tests/tinymodel.py's tokenizer, saved by the peer's transformers (both clients read it)."""
    out = work / "tokenizer"
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from tinymodel import build_tiny_tokenizer; build_tiny_tokenizer(Path(sys.argv[2]))")
    subprocess.run(
        [str(args.peer_venv / "bin" / "python"), "-c", code, str(ROOT / "tests"), str(out)],
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stderr=subprocess.DEVNULL,
    )
    return out


def matrix(args: argparse.Namespace) -> list[tuple[float, int]]:
    cells = [
        (float(itl), int(c)) for itl in args.itl_ms.split(",") for c in args.concurrency.split(",")
    ]
    if args.c512_at_5ms:
        cells.append((5.0, 512))
    return cells


def sweep(args: argparse.Namespace, work: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    harness = Harness(args, work, build_tokenizer(args, work))
    runs: list[dict[str, Any]] = []
    sims: dict[str, Any] = {}
    by_itl: dict[float, list[int]] = {}
    for itl, concurrency in matrix(args):
        by_itl.setdefault(itl, []).append(concurrency)
    for itl, levels in by_itl.items():
        env = {"OPSCTL_SIM_ITL_MS": f"{itl:g}", "OPSCTL_SIM_TTFT_MS": f"{args.ttft_ms:g}",
               "OPSCTL_SIM_ITL_SLOPE_MS": "0", "OPSCTL_SIM_FAULT": "none"}
        sim = localsim.start(["--model-path", "/models/GLM-5-NVFP4", "--served-model-name", SERVED,
                              "--enable-metrics"], env, log=work / f"sim-itl{itl:g}.log")
        harness.url, harness.itl_ms, harness.sim_pid = sim.url, itl, sim.process.pid
        sims[f"{itl:g}"] = {"argv": sim.argv, "env": env}
        try:
            for concurrency in levels:
                requests = max(args.min_requests, args.rounds * concurrency)
                for rep in range(args.reps):
                    for client in ("opsctl", "peer"):
                        run = harness.run(client, concurrency, requests, args.output_len)
                        run.update(itl_ms=itl, rep=rep)
                        derive(run, itl)
                        runs.append(run)
                        print(row_line(run), file=sys.stderr, flush=True)
        finally:
            sim.stop()
    return runs, sims


COLUMNS = (
    "ITL ms",
    "conc",
    "client",
    "CPU us/tok gross (steady)",
    "core client / sim",
    "ITL mean client / server (err %)",
    "ITL p50",
    "TTFT - server ms",
    "done/failed",
    "flags",
)


def row_line(run: dict[str, Any]) -> str:
    server, steady = run["server"], run["steady"] or {}
    cells = (f"{run['itl_ms']:g}", str(run["concurrency"]), run["client"],
             f"{_num(run['cpu_us_per_token'])} ({_num(run['cpu_us_per_token_steady'])})",
             f"{_num(steady.get('core_share'))} / {_num(steady.get('sim_core_share'))}",
             f"{_num(run['itl_mean_ms'])} / {_num(server['itl_mean_ms'])} "
             f"({_num(run.get('itl_mean_err_pct'))})",
             _num(run["itl_p50_ms"]), _num(run.get("ttft_minus_server_ms")),
             f"{run['completed']}/{run['failed']}", " ".join(run["flags"]) or "-")
    return "| " + " | ".join(cells) + " |"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value or 0.0:.4g}"  # no "-0"


def markdown(runs: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join(row_line(run) + "\n" for run in runs)


def summary(runs: list[dict[str, Any]]) -> str:
    """One row per (ITL, concurrency): each figure as opsctl / peer, the mean over reps."""
    cells: dict[tuple[float, int], dict[str, list[dict[str, Any]]]] = {}
    for run in runs:
        cells.setdefault((run["itl_ms"], run["concurrency"]), {}).setdefault(
            run["client"], []
        ).append(run)
    head = ("| ITL ms | conc | CPU us/tok steady (opsctl / peer) | core (opsctl / peer) | ITL mean "
            "err % | ITL p50 ms (server mean) | TTFT - server ms | flags |\n" + "|---" * 8 + "|\n")
    rows = []
    for (itl, concurrency), by_client in cells.items():
        def pair(key: str, by: dict[str, list[dict[str, Any]]] = by_client) -> str:
            return " / ".join(
                _mean([r.get(key) for r in by.get(c, [])]) for c in ("opsctl", "peer")
            )

        server_mean = _mean(
            [r["server"]["itl_mean_ms"] for group in by_client.values() for r in group]
        )
        flags = sorted({f"{c}: {flag}" for c, group in by_client.items() for r in group
                        for flag in r["flags"]})
        rows.append(f"| {itl:g} | {concurrency} | {pair('cpu_us_per_token_steady')} | "
                    f"{pair('core_share')} | {pair('itl_mean_err_pct')} | {pair('itl_p50_ms')} "
                    f"({server_mean}) | "
                    f"{pair('ttft_minus_server_ms')} | {'; '.join(flags) or '-'} |\n")
    return head + "".join(rows)


def _mean(values: list[Any]) -> str:
    numbers = [v for v in values if v is not None]
    return _num(statistics.fmean(numbers) if numbers else None)


def main() -> int:
    args = parse_args()
    cores = os.sched_getaffinity(0)
    if {args.sim_core, args.client_core} - cores or args.sim_core == args.client_core:
        raise SystemExit(f"needs two distinct cores of {sorted(cores)}: --sim-core, --client-core")
    if not (args.peer_venv / "bin" / "python").exists():
        raise SystemExit(f"no peer venv at {args.peer_venv}: run scripts/peer-bench-env.sh first")
    os.sched_setaffinity(0, {args.sim_core})  # the simulator, started from here, inherits it
    with tempfile.TemporaryDirectory(prefix="client-compare-") as tmp:
        runs, sims = sweep(args, Path(tmp))
    peer_version = subprocess.run(
        [
            str(args.peer_venv / "bin" / "python"),
            "-c",
            "from importlib.metadata import version; print(version('sglang'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    record = {
        "what": "opsctl bench's client against sglang.bench_serving on the same simulator",
        "command": "cd <checkout> && scripts/peer-bench-env.sh && "
                   + shlex.join([".venv/bin/python", "bench/client_compare.py", *sys.argv[1:]]),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpu_count": os.cpu_count(), "cores_used": {"simulator": args.sim_core,
                                                                "client": args.client_core},
                    "load_average_at_end": os.getloadavg()},
        "peer": {"sglang": peer_version, "module": "sglang.bench_serving", "backend": "sglang-oai",
                 "dataset": "random-ids"},
        "workload": {"input_tokens": args.input_len, "output_tokens": args.output_len,
                     "requests": f"max({args.min_requests}, {args.rounds} x concurrency)",
                     "reps": args.reps, "seed": args.seed, "order": "opsctl, peer, alternating"},
        "simulators": sims,
        "columns": {"CPU us/tok": "client CPU per streamed token: gross, whole run (steady: "
                                  f"10-90% of its tokens, /proc sampled every {SAMPLE_PERIOD_S} s)",
                    "core": "steady client CPU seconds per second (of its one core)",
                    "err": "client mean ITL vs the server's own", "flags":
                    f"sim-bound: server ITL > configured +{SIM_BOUND_PCT}%; client-bound: core >= "
                    f"{CLIENT_BOUND_SHARE}"},
        "runs": runs,
        "table": markdown(runs),
        "summary": summary(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(record["table"])
    print(record["summary"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
