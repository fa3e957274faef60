"""`core.plotting.load_matplotlib` in-process: a load that fails forgets only what it added.
(The interrupted-import case runs in a fresh interpreter:
tests/component/test_plotting_interrupt.py.)"""

from __future__ import annotations

import sys

import pytest

from opsctl.core.plotting import load_matplotlib


def test_a_missing_matplotlib_is_none_and_what_was_loaded_stays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib.pyplot")
    loaded = sys.modules["matplotlib.pyplot"]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert load_matplotlib() is None
    # Forgetting the loaded submodules too mixed two matplotlib instances in later tests (CI:
    # "Single argument to subplot must be a three-digit integer, not GridSpec").
    assert sys.modules["matplotlib.pyplot"] is loaded


def test_a_whole_load_gives_pyplot_and_dates_on_agg() -> None:
    pytest.importorskip("matplotlib")
    matplotlib = load_matplotlib()
    assert matplotlib is not None
    assert matplotlib.get_backend().lower() == "agg"
    assert matplotlib.pyplot is sys.modules["matplotlib.pyplot"]
    assert matplotlib.dates is sys.modules["matplotlib.dates"]
