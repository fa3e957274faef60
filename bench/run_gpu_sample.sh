#!/usr/bin/env bash
# One device call: bench's GPU sampling on a real GPU (test, then the recorded figures).
#   put pydantic's wheels for the device's Python in .gpu-wheels/ (git-ignored), then
#   run (kind nvidia-h200, carry .gpu-wheels):  bash bench/run_gpu_sample.sh
set -o pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out}"
mkdir -p "$OUT"
# The device's torch environment lacks pydantic (opsctl's models); install it beside, offline.
python3 -m pip install -q --no-index --target /tmp/gpu-sample-deps .gpu-wheels/*.whl
export PYTHONPATH="$PWD:/tmp/gpu-sample-deps"
python3 -m pytest -m gpu tests/gpu/test_gpu_sample_gpu.py -v -p no:cacheprovider --noconftest \
    2>&1 | tee "$OUT/gpu_sample_tests.log"
tests_rc=$?
python3 bench/gpu_sample_under_load.py --out "$OUT/gpu_sample_h200.json" 2>&1 | tail -5
bench_rc=$?
echo "gpu tests rc=$tests_rc bench rc=$bench_rc"
exit $(( tests_rc || bench_rc ))
