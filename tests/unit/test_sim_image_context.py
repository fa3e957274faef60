"""The simulator image's context: the modules the simulator imports, never a glob of the folder."""

from __future__ import annotations

from pathlib import Path

from opsctl.config.profiles import load_profile
from opsctl.core.paths import project_root
from opsctl.image.plan import plan, sim_modules


def write(root: Path, name: str, text: str) -> None:
    path = root / "opsctl" / "sim" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_only_what_the_simulator_imports_is_staged(tmp_path: Path) -> None:
    write(tmp_path, "__init__.py", '"""sim"""\n')
    write(tmp_path, "__main__.py", "from opsctl.sim.server import run\n")
    write(tmp_path, "server.py", "import json\nfrom opsctl.sim import wire\nfrom .api import x\n"
          "import opsctl.sim.metrics\n")
    write(tmp_path, "wire.py", "from opsctl.sim.config import Behaviour\n")
    for name in ("api.py", "config.py", "metrics.py"):
        write(tmp_path, name, "x = 1\n")
    write(tmp_path, "stray.py", "raise SystemExit('untracked experiment')\n")
    write(tmp_path, "notes_test.py", "import opsctl.sim.server\n")
    names = [path.name for path in sim_modules(tmp_path)]
    assert names == ["__init__.py", "__main__.py", "api.py", "config.py", "metrics.py",
                     "server.py", "wire.py"]


def test_the_real_simulator_plan_stages_exactly_its_import_closure() -> None:
    staged = {
        name for name in plan(load_profile("sim")).files if name.startswith("app/opsctl/sim/")
    }
    assert staged == {f"app/opsctl/sim/{path.name}" for path in sim_modules(project_root())}
    assert {"app/opsctl/sim/__main__.py", "app/opsctl/sim/server.py"} <= staged
