#!/usr/bin/env bash
# The lint gate CI runs before the tests: ruff (style, imports, bugbear, lines of at most 100
# characters, mccabe complexity <= 15 and at most 8 arguments per function in opsctl/) on the
# package, the tests, bench/ and the helper scripts; mypy (types) on the package and the helper
# scripts (not on the tests, whose fakes are typed loosely); radon's cyclomatic complexity <= 15
# for every function in opsctl/ (scripts/complexity.py: it also counts boolean operators and
# conditional expressions, which mccabe does not, so packing branches into one line does not
# hide them); the generated CLI reference, variant table and kernel benchmark tables (from the
# recorded JSON) must be current; import-linter's contracts (pyproject.toml: the layers, no
# cycles, the islands) must hold. No file-size cap: small functions matter, not small files.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check --no-cache opsctl tests bench scripts
.venv/bin/mypy opsctl scripts
.venv/bin/python scripts/complexity.py opsctl
.venv/bin/python scripts/cli_reference.py --check
.venv/bin/python scripts/variant_table.py --check
.venv/bin/python bench/kv_gather_cast_table.py bench/results/kv_gather_cast_bound_h200.json \
  --check README.md docs/kv-gather-cast.md
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
echo "lint: ruff (lines, complexity, arguments), mypy, radon complexity, import contracts," \
  "generated docs ok"
