#!/usr/bin/env bash
# One device call: the GPU correctness tests, then the benchmark. Outputs land in $OUT.
#   run (kind nvidia-h200):  bash bench/run_gpu.sh
set -o pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
python3 -m pytest -m gpu tests/gpu/test_kernel_kv_gather_cast_gpu.py -v -p no:cacheprovider --noconftest \
    2>&1 | tee "$OUT/gpu_tests.log"
tests_rc=$?
python3 bench/kv_gather_cast_bench.py --out "$OUT/kv_gather_cast_bound_h200.json" 2>&1 | tee "$OUT/bench.log"
bench_rc=$?
echo "gpu tests rc=$tests_rc bench rc=$bench_rc"
exit $(( tests_rc || bench_rc ))
