#!/usr/bin/env bash
# Quickstart, second command: the lint gate, then every test tier but gpu (unit and component
# in parallel workers, then integration: real dockerd, real Prometheus/Alertmanager). With
# arguments: pytest on those only, e.g. `./scripts/test.sh tests/unit` for the fast tier (add
# `-n 3` for workers). GPU tests run on the accelerator machine only: see tests/gpu/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# On a machine where the first command has not run yet, set it up first (idempotent).
if ! [ -x .venv/bin/pytest ] || ! .venv/bin/python -c 'import xdist' 2>/dev/null \
    || ! docker info >/dev/null 2>&1; then
  bash scripts/setup.sh
fi
# The Ctrl-C tests send SIGINT to what they start. A runner that starts this script with SIGINT
# ignored (a background job of a non-interactive shell, `nohup ... &`) passes SIG_IGN on to every
# child, and a process that inherits it never sees a Ctrl-C: pytest runs with SIGINT's default.
sigint_default=(.venv/bin/python -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])')
if [ "$#" -eq 0 ]; then
  ./scripts/lint.sh
  # The tiers without the engine run in parallel worker processes (pytest-xdist; every test
  # starts its own servers on free loopback ports and writes under its own tmp_path). The
  # integration tier shares one Docker engine, its image trust records and the simulator image,
  # so it runs in one process. Both run; the script fails if either failed.
  status=0
  trap 'exit 130' INT  # a Ctrl-C ends the run: pytest exits 2 on it, and bash would go on
  "${sigint_default[@]}" .venv/bin/pytest -m "not gpu" -n "${OPSCTL_TEST_WORKERS:-3}" \
    tests/unit tests/component || status=$?
  "${sigint_default[@]}" .venv/bin/pytest -m "not gpu" tests/integration || status=$?
  exit "$status"
fi
exec "${sigint_default[@]}" .venv/bin/pytest -m "not gpu" "$@"
