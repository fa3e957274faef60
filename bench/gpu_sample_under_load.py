"""Does bench's GPU sampling read a busy GPU as busy? nvidia-smi through opsctl's GpuProbe.

Reads every GPU idle, then while a background thread keeps GPU 0 busy with half-precision
matmuls over a 4 GiB allocation, the way bench samples during a level (GpuProbe.query into a
GpuTally every 0.25 s). Writes the figures, with the command, as JSON. Needs a CUDA GPU and
torch; run on the accelerator machine through bench/run_gpu_sample.sh.

    python3 bench/gpu_sample_under_load.py --out bench/results/gpu_sample_h200.json
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

from opsctl.traffic.bench.gpu_sample import GpuFigure, GpuProbe, GpuTally

LOAD_BYTES = 4 << 30


def _tally(probe: GpuProbe, seconds: float, interval_s: float = 0.25) -> list[GpuFigure]:
    tally = GpuTally()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tally.add(probe.query())
        time.sleep(interval_s)
    return tally.figures()


def measure(seconds: float = 4.0) -> dict[str, Any]:
    """Idle figures, then figures under load on GPU 0; and what the load was."""
    import torch

    probe = GpuProbe()
    idle = _tally(probe, 1.0)
    stop = threading.Event()
    hold = torch.empty(LOAD_BYTES, dtype=torch.uint8, device="cuda:0")
    a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.float16)

    def busy() -> None:
        while not stop.is_set():
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        time.sleep(0.5)  # let the first kernels start
        loaded = _tally(probe, seconds)
    finally:
        stop.set()
        worker.join()
    del hold
    return {"idle": [f.model_dump() for f in idle], "loaded": [f.model_dump() for f in loaded],
            "load": {"gpu": 0, "held_bytes": LOAD_BYTES, "kernel": "fp16 matmul 8192^3, in a loop",
                     "seconds": seconds, "sample_interval_s": 0.25}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    record = {
        "what": "opsctl bench's GPU sampling (GpuProbe + GpuTally) idle and under load",
        "command": "bash bench/run_gpu_sample.sh (runs: " + shlex.join(
            ["python3", "bench/gpu_sample_under_load.py", *sys.argv[1:]]) + ")",
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__},
        **measure(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
