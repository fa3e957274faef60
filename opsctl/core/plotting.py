"""matplotlib for the views that draw charts: loaded on first use (it takes a second), with the
Agg backend (files only, never a display), by this one function.

An import of matplotlib cut short by Ctrl-C leaves its submodules in `sys.modules` bound to the
half-run package, and every later import in the process then fails (`module 'matplotlib' has
no attribute 'get_data_path'`, a traceback at exit 1: the Ctrl-C module found it in `decide`'s
bench plots). So a load that fails in any way
forgets the matplotlib modules it added before the failure goes on, and the next load starts
clean.

A chart is drawn whole (`drawing`): matplotlib's compiled transforms (pybind11) turn an
exception raised inside their argument conversion into "TypeError: incompatible function
arguments", so a Ctrl-C landing there was a traceback (the integration Ctrl-C module, CI
rehearsal, `decide` under SIGTERM while bench's plots were drawn). An interrupt waits until the
chart is written (opsctl.core.interrupts.held), then goes on as any other.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import ParamSpec, TypeVar

from opsctl.core.interrupts import held

PLOT_EXTRA = "pip install -e '.[plot]'"
P = ParamSpec("P")
R = TypeVar("R")


def drawing(draw: Callable[P, R]) -> Callable[P, R]:
    """`draw` (a view's chart writer) runs as one `held` section."""

    @functools.wraps(draw)
    def whole(*args: P.args, **kwargs: P.kwargs) -> R:
        with held():
            return draw(*args, **kwargs)

    return whole


def load_matplotlib() -> ModuleType | None:
    """The `matplotlib` package with `pyplot` and `dates` loaded, or None when it cannot be
    imported (not installed, or broken)."""
    before = _loaded()
    try:
        import matplotlib

        matplotlib.use("Agg")
        # Every text drawn is names and figures, never math: `$...$` in a variant's, a
        # model's or a GPU's name is drawn as it is (mathtext raised ValueError on one it
        # could not parse, after the whole sweep).
        matplotlib.rcParams["text.parse_math"] = False
        import matplotlib.dates
        import matplotlib.pyplot
    except ImportError:
        _forget(before)
        return None
    except BaseException:
        _forget(before)
        raise
    return matplotlib


def _loaded() -> set[str]:
    return {name for name in sys.modules if name.partition(".")[0] == "matplotlib"}


def _forget(before: set[str]) -> None:
    """Forget the matplotlib modules this failed load added; what was loaded before stays (a
    whole earlier load, or a test's stand-in)."""
    for name in _loaded() - before:
        del sys.modules[name]
