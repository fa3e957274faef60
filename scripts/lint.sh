#!/usr/bin/env bash
# The lint gate CI runs before the tests: ruff (style, imports, bugbear) and mypy (types) on the
# package, the tests and the helper scripts, and the 400-line limit per opsctl module.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check opsctl tests bench scripts
.venv/bin/mypy opsctl
.venv/bin/python scripts/cli_reference.py --check
.venv/bin/python scripts/variant_table.py --check
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
too_long=$(find opsctl -name '*.py' -exec wc -l {} + | awk '$2 != "total" && $1 > 400 {print $2 " (" $1 " lines)"}')
if [ -n "$too_long" ]; then
  echo "modules over 400 lines:" >&2
  echo "$too_long" >&2
  exit 1
fi
echo "lint: ruff, mypy and module size ok"
