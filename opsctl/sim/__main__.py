"""``python3 -m opsctl.sim <sglang launch flags>``: see the package docstring."""

import sys

from opsctl.sim.server import run

if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
