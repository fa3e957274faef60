#!/usr/bin/env bash
# Quickstart, first command: set up a fresh machine and run the main job on the embedded
# simulator default: build the image, bring the server up, prove it serves.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/opsctl build --profile sim
.venv/bin/opsctl up --profile sim --variant gathercast --replace
.venv/bin/opsctl status
.venv/bin/opsctl smoke --profile sim --variant gathercast
echo
echo "Serving on http://127.0.0.1:30000 (sglang API). Stop it with: .venv/bin/opsctl down"
