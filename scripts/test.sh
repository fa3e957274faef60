#!/usr/bin/env bash
# Quickstart, second command: the lint gate, then every test tier but gpu (unit, component,
# integration: real dockerd, real Prometheus/Alertmanager). With arguments: pytest on those only,
# e.g. `./scripts/test.sh tests/unit` for the fast tier. GPU tests run on the accelerator machine
# only: see tests/gpu/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# On a machine where the first command has not run yet, set it up first (idempotent).
if ! [ -x .venv/bin/pytest ] || ! docker info >/dev/null 2>&1; then
  bash scripts/setup.sh
fi
if [ "$#" -eq 0 ]; then
  ./scripts/lint.sh
  exec .venv/bin/pytest -m "not gpu" tests/unit tests/component tests/integration
fi
exec .venv/bin/pytest -m "not gpu" "$@"
