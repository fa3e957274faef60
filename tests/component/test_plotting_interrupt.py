"""`core.plotting.load_matplotlib` after an import of matplotlib that a Ctrl-C cut short: the
next load in the same process works. Before, the half-run package stayed bound in its
submodules and the next import failed with `module 'matplotlib' has no attribute
'get_data_path'` (the Ctrl-C module's `decide` case under load, seed 43: a traceback, exit 1).
Runs in a fresh interpreter, where matplotlib has not been imported yet."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

SCRIPT = r"""
import importlib.abc, sys
from opsctl.core.plotting import load_matplotlib

class CtrlCOnce(importlib.abc.MetaPathFinder):
    fired = False
    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib.rcsetup" and not CtrlCOnce.fired:  # imported halfway through
            CtrlCOnce.fired = True
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlCOnce())
try:
    load_matplotlib()
except KeyboardInterrupt:
    print("first: interrupted")
mpl = load_matplotlib()
figure = mpl.pyplot.figure()
print("second:", type(figure).__name__, mpl.get_backend().lower())
"""


def test_a_load_cut_short_by_ctrl_c_leaves_the_next_load_working() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["first: interrupted", "second: Figure agg"], done.stdout
