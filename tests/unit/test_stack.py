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
    record = stack.StackRecord("0.5.15", Path("x"), "4.57.1", {"nvidia/GLM-5-NVFP4": {
        "architecture": "GlmMoeDsaForCausalLM", "config": "tests/fixtures/glm5/config.json",
        "loads": False, "error": "ValueError: model type `glm_moe_dsa` unknown. Update it."}})
    problem = record.model_problem("nvidia/GLM-5-NVFP4", "GlmMoeDsaForCausalLM")
    assert problem is not None and "transformers 4.57.1" in problem and "Update it" not in problem
    assert "nvidia/GLM-5-NVFP4's config.json" in problem
    assert record.model_problem(None, "LlamaForCausalLM") is None  # never checked: not refused


def _family(**loads: bool) -> stack.StackRecord:
    return stack.StackRecord("9.9.9", Path("x"), "9.0", {repo: {
        "architecture": "GlmMoeDsaForCausalLM", "config": f"tests/fixtures/{repo}/config.json",
        "loads": ok, **({} if ok else {"error": f"KeyError: {repo} breaks"})}
        for repo, ok in loads.items()})


def test_each_family_member_is_judged_by_its_own_executed_record() -> None:
    """One architecture, three configs: a member whose config the release's transformers cannot
    load is refused with its own error, while its siblings still load."""
    record = _family(glm5=True, glm52=False)
    problem = record.model_problem("glm52", "GlmMoeDsaForCausalLM")
    assert problem is not None and "KeyError: glm52 breaks" in problem
    assert "tests/fixtures/glm52/config.json" in problem
    assert record.model_problem("glm5", "GlmMoeDsaForCausalLM") is None
    # A checkpoint with no record of its own is refused only when every member failed.
    assert record.model_problem("someone/GLM-5-NVFP4", "GlmMoeDsaForCausalLM") is None
    assert _family(glm5=False).model_problem("someone/GLM-5-NVFP4", "GlmMoeDsaForCausalLM")


def test_the_committed_records_say_what_each_release_can_load() -> None:
    for version in ("0.5.15", "0.5.23"):
        record = stack.load(version)
        assert record is not None
        for repo in stack.MODEL_CONFIGS:
            assert record.model_problem(repo, "GlmMoeDsaForCausalLM") is None, (version, repo)
    new = stack.load("0.5.23")
    assert new is not None
    # transformers 5.19.0 keeps GLM-5.2's IndexShare keys: 57 of 78 layers reuse the top-k.
    glm52 = new.models["nvidia/GLM-5.2-NVFP4"]["fields"]
    assert glm52["indexer_types_shared"] == 57 and glm52["index_topk_freq"] == 4
    assert new.models["nvidia/GLM-5-NVFP4"]["fields"]["indexer_types_shared"] == 0


@pytest.mark.parametrize("version", ["0.5.15\n", "0.5.23\n", "1" * 65])
def test_a_version_with_a_trailing_newline_or_past_64_characters_is_refused_before_the_wheel(
        version: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`$` matched before a trailing newline: `--version $'0.5.15\\n'` ran `pip download
    sglang==0.5.15\\n` and printed a two-line error; a 5000-character version was sent to pip."""
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
