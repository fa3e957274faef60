#!/usr/bin/env bash
# Quickstart, second command: the unit and integration tests (real dockerd, real Prometheus).
# GPU tests run on the accelerator machine only: see tests/gpu/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/pytest -m "not gpu" "$@"
