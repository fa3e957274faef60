#!/usr/bin/env bash
# Quickstart, second command: the unit and integration tests (real dockerd, real Prometheus).
# GPU tests run on the accelerator machine only: see tests/gpu/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# On a machine where the first command has not run yet, set it up first (idempotent).
if ! [ -x .venv/bin/pytest ] || ! docker info >/dev/null 2>&1; then
  bash scripts/setup.sh
fi
exec .venv/bin/pytest -m "not gpu" "$@"
