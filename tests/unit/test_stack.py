"""The stack record's pure parts: METADATA pins, the refusal text, bad versions (no network)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from opsctl.argspec import stack
from opsctl.core.errors import BuildError, UsageError


def _wheel(tmp_path: Path, metadata: str) -> Path:
    path = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sglang-9.9.9.dist-info/METADATA", metadata)
    return path


def test_metadata_pins_take_unconditional_exact_pins_only(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, "\n".join([
        "Name: sglang", "Requires-Dist: transformers==5.19.0", "Requires-Dist: torch==2.14.1",
        "Requires-Dist: numpy>=1.0", "Requires-Dist: flashinfer_python==0.7.2; extra == 'x'",
        "Requires-Dist: Sgl_Kernel==0.4.10", "Requires-Dist: weird==1,<2",
        "Requires-Dist: humming-kernels[cu13]==0.1.12",
    ]))
    assert stack.metadata_pins(wheel) == {"humming-kernels": "0.1.12",
        "sgl-kernel": "0.4.10", "torch": "2.14.1", "transformers": "5.19.0"}


def test_a_wheel_without_metadata_is_a_build_error(tmp_path: Path) -> None:
    path = tmp_path / "x.whl"
    path.write_bytes(b"not a zip")
    with pytest.raises(BuildError, match="no readable METADATA"):
        stack.metadata_pins(path)


def test_the_refusal_names_the_release_its_transformers_and_the_executed_error() -> None:
    record = stack.StackRecord("0.5.9", Path("x"), "4.57.1", {"GlmMoeDsaForCausalLM": {
        "loads": False, "error": "ValueError: model type `glm_moe_dsa` unknown. Update it."}})
    problem = record.model_problem("GlmMoeDsaForCausalLM")
    assert problem is not None and "transformers 4.57.1" in problem and "Update it" not in problem
    assert record.model_problem("LlamaForCausalLM") is None  # never checked: not refused


def test_the_committed_records_say_what_each_release_can_load() -> None:
    old, new = stack.load("0.5.9"), stack.load("0.5.23")
    assert old is not None and old.model_problem("GlmMoeDsaForCausalLM")
    assert new is not None and new.model_problem("GlmMoeDsaForCausalLM") is None


@pytest.mark.parametrize("version", ["0.5.9\n", "0.5.23\n", "1" * 65])
def test_a_version_with_a_trailing_newline_or_past_64_characters_is_refused_before_the_wheel(
        version: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`$` matched before a trailing newline: `--version $'0.5.9\\n'` ran `pip download
    sglang==0.5.9\\n` and printed a two-line error; a 5000-character version was sent to pip."""
    def reached(*_: object, **__: object) -> Path:
        raise AssertionError("the wheel was looked up")

    monkeypatch.setattr(stack, "ensure_wheel", reached)
    with pytest.raises(UsageError, match="is not a sglang version"):
        stack.generate(version, tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_output_that_cannot_be_written_is_refused_before_the_wheel(
        kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`--output` a FIFO or a directory was refused only at the write, after the wheel download
    and the pip install of the side environment (minutes on a cold cache)."""
    from opsctl.argspec import extract

    def reached(*_: object, **__: object) -> Path:
        raise AssertionError("the wheel was looked up")

    monkeypatch.setattr(stack, "ensure_wheel", reached)
    monkeypatch.setattr(extract, "ensure_wheel", reached)
    target = tmp_path / "out.json"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    for generate in (stack.generate, extract.extract):
        with pytest.raises(UsageError, match="--output"):
            generate("0.5.23", tmp_path, target)
