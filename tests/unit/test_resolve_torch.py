"""`profile resolve` from an installed opsctl (issue 33 item 6): an environment without torch
(pipx, uv tool) gets the CPU build installed once by pip beside the side environment, announced
before pip starts; a failure is one line, and nothing half-installed is left.

pip runs for real, from a local folder holding a small stand-in wheel named as the pinned CPU
torch (the real one is hundreds of MB); pip's configuration files and the machine's own wheel
folders are switched off, so only that folder can answer.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import zipfile
from pathlib import Path

import pytest

from opsctl.argspec import resolution
from opsctl.core.errors import BuildError

VERSION = resolution.TORCH_CPU.split("==")[1]


@pytest.fixture(autouse=True)
def _no_torch_and_no_pip_config(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.distribution

    def distribution(name: str) -> importlib.metadata.Distribution:
        if name == "torch":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)


def _stand_in_wheel(folder: Path) -> Path:
    """torch-<pinned>+cpu as a wheel whose only module says which version it is."""
    folder.mkdir()
    info = f"torch-{VERSION}+cpu.dist-info"
    files = {
        "torch/__init__.py": f'__version__ = "{VERSION}+cpu"\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {VERSION}+cpu\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                         "Tag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    wheel = folder / f"torch-{VERSION}+cpu-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in {**files, f"{info}/RECORD": "\n".join(record) + "\n"}.items():
            archive.writestr(name, text)
    return wheel


def test_without_torch_the_cpu_build_is_installed_once_and_announced_first(
        tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    _stand_in_wheel(wheels)
    source = ("--no-index", "--find-links", str(wheels))
    notes: list[str] = []
    root = tmp_path / "resolve"
    found = resolution.torch_environment(root, notes.append, source)
    assert (found / "torch" / "__init__.py").read_text() == f'__version__ = "{VERSION}+cpu"\n'
    (note,) = notes
    assert note.startswith("opsctl's environment has no torch: installing the CPU build "
                           f"({resolution.TORCH_CPU}, ") and str(found) in note
    # Cached: no pip, no note (the folder pip read is gone).
    for wheel in wheels.iterdir():
        wheel.unlink()
    assert resolution.torch_environment(root, notes.append, source) == found and len(notes) == 1
    assert sorted(p.name for p in root.iterdir()) == [found.name]


def test_the_default_source_is_pytorchs_cpu_index() -> None:
    assert resolution.TORCH_CPU_SOURCE == ("--index-url", "https://download.pytorch.org/whl/cpu")


def test_a_failed_install_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    root = tmp_path / "resolve"
    with pytest.raises(BuildError) as caught:
        resolution.torch_environment(root, lambda line: None,
                                     ("--no-index", "--find-links", str(empty)))
    assert caught.value.message.startswith(
        f"pip could not install {resolution.TORCH_CPU} for the resolution: ")
    assert "\n" not in caught.value.message and "CPU build" in caught.value.hint
    assert list(root.iterdir()) == []
