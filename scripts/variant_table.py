"""The README's variant table, from the `opsctl profile resolve` records of the GPU profile.

    python3 scripts/variant_table.py            # rewrite the block in README.md
    python3 scripts/variant_table.py --check    # exit 1 when it is stale

After `opsctl profile resolve --write-records`, run it and commit both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opsctl.config.profiles import load_profile
from opsctl.config.review import replace_variant_table, variant_table

README = Path(__file__).resolve().parents[1] / "README.md"
PROFILE = "glm5-nvfp4-rtx6000"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = README.read_text()
    updated = replace_variant_table(text, variant_table(load_profile(PROFILE)))
    if args.check:
        if updated != text:
            print("README.md's variant table is stale: run python3 scripts/variant_table.py",
                  file=sys.stderr)
            return 1
        return 0
    README.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
