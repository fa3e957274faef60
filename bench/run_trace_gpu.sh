#!/usr/bin/env bash
# One device call: real torch-profiler traces of the decode-step stand-in (stock full-pool cast
# vs gather-then-cast), shrunk and gzipped into $OUT with the run's JSON summary.
#   run (kind nvidia-h200):  bash bench/run_trace_gpu.sh
set -o pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
python3 bench/trace_decode_step.py --out "$OUT" 2>&1 | grep -v '^USDT:' | tee "$OUT/trace_decode_step.log"
