#!/usr/bin/env bash
# The lint gate CI runs before the tests: ruff (style, imports, bugbear, complexity <= 15 and at
# most 8 arguments per function in opsctl/) and mypy (types) on the package, the tests and the
# helper scripts; the generated CLI reference, variant table and kernel benchmark tables (from
# the recorded JSON) must be current; import-linter's contracts (pyproject.toml: the layers, no
# cycles, the islands) must hold. No file-size cap: small functions matter, not small files.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check --no-cache opsctl tests bench scripts
.venv/bin/mypy opsctl
.venv/bin/python scripts/cli_reference.py --check
.venv/bin/python scripts/variant_table.py --check
.venv/bin/python bench/kv_gather_cast_table.py bench/results/kv_gather_cast_bound_h200.json \
  --check README.md docs/kv-gather-cast.md
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
echo "lint: ruff (complexity, arguments), mypy, import contracts, generated docs ok"
