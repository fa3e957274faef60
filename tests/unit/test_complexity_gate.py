"""scripts/complexity.py, the lint gate's radon count: a branch packed into `and`/`or` or a
conditional expression counts like the `if` it replaces; methods and closures are measured too."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from opsctl.core.paths import project_root


def _gate() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "complexity_gate", project_root() / "scripts" / "complexity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PACKED = '''
def packed(a, b, c, d):
    return (a and b) or (c and d) or (a if b else c) or (d if c else b)
'''

SPLIT = '''
def split(a):
    if a:
        return 1
    return 2
'''

NESTED = '''
class Holder:
    def method(self, a, b):
        def inner(x):
            return x and a or b and x or a and b
        return inner
'''


def test_packed_boolean_operators_and_conditional_expressions_count(tmp_path: Path) -> None:
    gate = _gate()
    source = tmp_path / "packed.py"
    source.write_text(PACKED)
    (found,) = gate.over_limit(source, 5)
    assert "packed (8)" in found
    assert gate.over_limit(source, 8) == []


def test_methods_and_closures_are_measured_each_once(tmp_path: Path) -> None:
    gate = _gate()
    (tmp_path / "nested.py").write_text(NESTED)
    (tmp_path / "split.py").write_text(SPLIT)
    found = gate.over_limit(tmp_path, 3)
    assert len(found) == 1 and " inner (" in found[0]


def test_the_gate_fails_listing_each_function_above_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = _gate()
    (tmp_path / "packed.py").write_text(PACKED)
    (tmp_path / "split.py").write_text(SPLIT)
    assert gate.main([str(tmp_path), "--limit", "5"]) == 1
    out = capsys.readouterr().out
    assert "packed (8)" in out and "split" not in out
    assert gate.main([str(tmp_path)]) == 0

