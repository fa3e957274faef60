"""The wheel carries the project's data folders as opsctl/_data/<folder> (opsctl.core.paths).

The folders stay at the top of the checkout; a wheel build (not an editable install, which reads
them in place) copies them into the package, minus host state and bytecode.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _paths() -> ModuleType:
    # opsctl.core.paths is stdlib only: read from the file, before opsctl's dependencies exist.
    source = ROOT / "opsctl" / "core" / "paths.py"
    spec = importlib.util.spec_from_file_location("_opsctl_paths", source)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        paths = _paths()
        target = Path(self.build_lib) / "opsctl" / paths.DATA_DIR
        shutil.rmtree(target, ignore_errors=True)
        skip = {ROOT / rel for rel in paths.NOT_PACKAGED}
        for rel in paths.PACKAGED:
            source = ROOT / rel
            if not source.is_dir():
                raise SystemExit(f"opsctl's data folder {rel}/ is missing from {ROOT}")

            def ignore(folder: str, names: list[str], skip: set[Path] = skip) -> set[str]:
                return {name for name in names if name == "__pycache__"
                        or name.endswith(".pyc") or Path(folder, name) in skip}

            shutil.copytree(source, target / rel, ignore=ignore)


setup(cmdclass={"build_py": BuildPyWithData})
