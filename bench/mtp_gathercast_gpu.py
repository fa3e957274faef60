"""Device run of issue 35: FP8 KV + MTP with the gather-then-cast patch, measured, nothing else.

    python3 bench/mtp_gathercast_gpu.py --out DIR [--models DIR] [--contexts 512,4096,16384]
        [--output-tokens 64] [--repeats 3] [--deadline-s 540]
    on the device: PHASES=install,patch,mtp bash bench/run_sglang_gpu.sh  (kind nvidia-h200)

On a tiny GLM-5-shaped model with one NextN layer (bench/make_tiny_models.py --kind glm5-mtp),
three sglang servers run one after another (bench/sglang_bundle/tiny-glm5-mtp-h200.yaml):
`fp8kv-mtp` (stock), `gathercast-mtp` (the patch), `bf16kv-mtp`. Each serves the same greedy
requests at every context length (streamed /generate, ignore_eos). What it settles:
- parity: the patched server's greedy output and accept length (sglang's own meta_info
  `spec_accept_length` = completion tokens / verify steps) equal the stock FP8 server's, request
  by request;
- the patch's start-up lines: active on the target's pool and on the draft model's;
- TPOT (per output token: (end - first token) / (tokens - 1), median over the repeats) of all
  three at each context length, side by side.
Everything before the first server runs on CPU (model, plan, prompts); without CUDA it stops
there, says so and exits 3. Exit codes: 0 measured and parity holds; 2 parity broken (outputs or
accept lengths differ, or the patch was not active on both pools); 3 no CUDA: stopped before
starting sglang; 4 a server did not become ready (its log is in DIR).
Results: DIR/plan.json, DIR/results.json, DIR/server-<variant>.log.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "bench" / "sglang_bundle" / "tiny-glm5-mtp-h200.yaml"
STOCK, PATCHED, BF16 = "fp8kv-mtp", "gathercast-mtp", "bf16kv-mtp"
VARIANTS = (STOCK, PATCHED, BF16)
MODEL_KIND = "glm5-mtp"
EXIT_OK, EXIT_PARITY, EXIT_NEEDS_CUDA, EXIT_NOT_READY = 0, 2, 3, 4
NEEDS_CUDA = "needs CUDA from here"
READY_TIMEOUT_S = 300
REQUEST_TIMEOUT_S = 300


def build_plan(models: Path) -> list[dict[str, Any]]:
    """Each server's argv, env and URL, from the bench profile (the model path is `models`')."""
    sys.path.insert(0, str(ROOT))
    from opsctl.config.profiles import check_argv, load_profile
    from opsctl.kernels.kv_gather_cast import SWITCH_ENV

    profile = load_profile(str(PROFILE))
    plan = []
    for name in VARIANTS:
        deployment = profile.resolve(name)
        argv = check_argv(deployment)
        argv[argv.index("--model-path") + 1] = str(models / f"tiny-{MODEL_KIND}")
        server = deployment.server
        plan.append({"variant": name, "argv": argv, "patched": deployment.patched,
                     "env": {SWITCH_ENV: deployment.env[SWITCH_ENV]},
                     "url": f"http://{server.host}:{server.port}",
                     "served_name": deployment.profile.model.served_name})
    return plan


def prompts(contexts: Sequence[int], repeats: int) -> list[dict[str, Any]]:
    """Deterministic prompts of `n` words (one token each: the tiny model's word-level
    vocabulary)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from make_tiny_models import SPECIALS, _vocab

    words = [w for w in _vocab() if w not in SPECIALS]
    out = []
    for n in contexts:
        for r in range(repeats):
            text = " ".join(words[(i * 7 + r * 13 + n) % len(words)] for i in range(n))
            out.append({"context": n, "repeat": r, "text": text})
    return out


def cuda_missing() -> str | None:
    """Why sglang cannot start here, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return None


def start(entry: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **entry["env"]}
    with log.open("wb") as sink:
        return subprocess.Popen(entry["argv"], env=env, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_ready(url: str, process: subprocess.Popen[bytes], deadline: float) -> bool:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{url}/health_generate", timeout=10) as reply:
                if reply.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(2)
    return False


def generate(url: str, text: str, output_tokens: int) -> dict[str, Any]:
    """One greedy streamed /generate: output text, sglang's meta_info, TTFT and TPOT."""
    body = json.dumps({"text": text, "stream": True, "sampling_params": {
        "temperature": 0, "max_new_tokens": output_tokens, "ignore_eos": True}}).encode()
    request = urllib.request.Request(f"{url}/generate", data=body,
                                     headers={"Content-Type": "application/json"})
    t0, first, last, chunk = time.perf_counter(), None, None, {}
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as reply:
        for raw in reply:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            now = time.perf_counter()
            if first is None and chunk.get("meta_info", {}).get("completion_tokens", 0) > 0:
                first = now
            last = now
    meta = chunk.get("meta_info", {})
    tokens = int(meta.get("completion_tokens", 0))
    tpot = None if first is None or last is None or tokens < 2 else (last - first) / (tokens - 1)
    return {"text": chunk.get("text", ""), "completion_tokens": tokens,
            "spec_verify_ct": meta.get("spec_verify_ct"),
            "spec_accept_length": meta.get("spec_accept_length"),
            "ttft_s": None if first is None else first - t0,
            "tpot_ms": None if tpot is None else tpot * 1e3}


def markers(log: Path) -> list[dict[str, Any]]:
    from opsctl.kernels.kv_gather_cast import parse_marker

    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    return [m for m in map(parse_marker, lines) if m is not None]


def run_variant(entry: dict[str, Any], work: list[dict[str, Any]], out: Path,
                args: argparse.Namespace, deadline: float) -> dict[str, Any]:
    log = out / f"server-{entry['variant']}.log"
    process = start(entry, log)
    try:
        if not wait_ready(entry["url"], process, min(deadline, time.monotonic() + READY_TIMEOUT_S)):
            return {"ready": False, "markers": markers(log)}
        generate(entry["url"], work[0]["text"], 4)  # warm-up: first-request JIT and graph paths
        results = [{**item, **generate(entry["url"], item["text"], args.output_tokens)}
                   for item in work if time.monotonic() < deadline]
        return {"ready": True, "requests": results, "markers": markers(log)}
    finally:
        stop(process)


def compare(measured: dict[str, dict[str, Any]], contexts: Sequence[int]) -> dict[str, Any]:
    """Parity of the patched server with stock FP8, request by request; TPOT medians side by
    side."""

    def by_key(name: str) -> dict[tuple[int, int], dict[str, Any]]:
        reqs = measured.get(name, {}).get("requests", [])
        return {(r["context"], r["repeat"]): r for r in reqs}

    stock, patched = by_key(STOCK), by_key(PATCHED)
    mismatches = [{"context": k[0], "repeat": k[1], "field": field}
                  for k in sorted(stock.keys() & patched.keys())
                  for field in ("text", "completion_tokens", "spec_verify_ct", "spec_accept_length")
                  if stock[k][field] != patched[k][field]]
    roles = {m.get("role") for m in measured.get(PATCHED, {}).get("markers", [])
             if m.get("state") == "active"}
    tpot = {name: {n: _median([r["tpot_ms"] for k, r in by_key(name).items() if k[0] == n])
                   for n in contexts} for name in VARIANTS}
    compared = len(stock.keys() & patched.keys())
    return {"compared_requests": compared, "mismatches": mismatches,
            "patch_active_roles": sorted(r for r in roles if r),
            "parity": compared > 0 and not mismatches and roles >= {"target", "draft"},
            "tpot_ms_median": tpot}


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", type=Path, default=Path("/tmp/models"))
    parser.add_argument("--contexts", default="512,4096,16384",
                        help="prompt lengths in tokens, comma-separated")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--deadline-s", type=float, default=540.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    deadline = time.monotonic() + args.deadline_s
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "bench"))
    from make_tiny_models import write_model

    model = write_model(args.models / f"tiny-{MODEL_KIND}", MODEL_KIND)
    contexts = [int(n) for n in args.contexts.split(",")]
    plan, work = build_plan(args.models), prompts(contexts, args.repeats)
    (args.out / "plan.json").write_text(json.dumps(
        {"model": str(model), "plan": plan, "contexts": contexts, "repeats": args.repeats,
         "output_tokens": args.output_tokens, "prompts": len(work)}, indent=1) + "\n")
    print(f"model {model}; plan {args.out / 'plan.json'}: {', '.join(VARIANTS)}; "
          f"{len(work)} prompts at {contexts} tokens", flush=True)
    missing = cuda_missing()
    if missing is not None:
        print(f"stopped before starting sglang: {NEEDS_CUDA} ({missing})", flush=True)
        return EXIT_NEEDS_CUDA
    measured = {entry["variant"]: run_variant(entry, work, args.out, args, deadline)
                for entry in plan}
    summary = compare(measured, contexts)
    (args.out / "results.json").write_text(json.dumps(
        {"summary": summary, "measured": measured}, indent=1) + "\n")
    print(json.dumps(summary, indent=1), flush=True)
    if not all(m.get("ready") for m in measured.values()):
        return EXIT_NOT_READY
    return EXIT_OK if summary["parity"] else EXIT_PARITY


if __name__ == "__main__":
    sys.exit(main())
