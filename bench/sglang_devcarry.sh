#!/usr/bin/env bash
# Stage what a device call needs into the lead checkout's ignored .devcarry/ (the device tool ships
# that checkout, not this worktree): the bundle parts and the branch's files the run uses.
#   bash bench/sglang_devcarry.sh /work/main     (then run with carry [".devcarry"])
set -euo pipefail
ROOT=${1:?checkout the device tool ships}
HERE=$(cd "$(dirname "$0")/.." && pwd)
grep -qx '/.devcarry/' "$ROOT/.git/info/exclude" 2>/dev/null || echo /.devcarry/ >> "$ROOT/.git/info/exclude"
mkdir -p "$ROOT/.devcarry"
rm -rf "$ROOT/.devcarry/overlay"; mkdir -p "$ROOT/.devcarry/overlay"
cd "$HERE"
for p in bench/run_sglang_gpu.sh bench/make_tiny_models.py bench/sglang_bundle patches/sglang/0.5.15 \
         opsctl tests/gpu pyproject.toml; do
  mkdir -p "$ROOT/.devcarry/overlay/$(dirname "$p")"; cp -r "$p" "$ROOT/.devcarry/overlay/$p"
done
find "$ROOT/.devcarry/overlay" -name __pycache__ -prune -exec rm -rf {} +
[ -d "$ROOT/.devcarry/bundle" ] || python3 bench/sglang_bundle.py assemble --out "$ROOT/.devcarry/bundle"
du -sb "$ROOT/.devcarry"/* | awk '{printf "%s %.1f MiB\n", $2, $1/1048576}'
