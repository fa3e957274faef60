"""opsctl/sim runs in a container with only python3 and prometheus_client: check its imports."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SIM_DIR = Path(__file__).resolve().parents[2] / "opsctl" / "sim"
ALLOWED_THIRD_PARTY = {"prometheus_client"}


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: stays inside opsctl.sim
                continue
            names.add(node.module or "")
    return names


def test_sim_imports_only_stdlib_prometheus_client_and_itself() -> None:
    files = sorted(SIM_DIR.glob("*.py"))
    assert files, SIM_DIR
    offenders = []
    for path in files:
        for name in _imported_modules(path):
            top = name.split(".")[0]
            inside = name == "opsctl" or name.startswith("opsctl.sim")
            if not (inside or top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY):
                offenders.append(f"{path.name}: {name}")
    assert offenders == []
