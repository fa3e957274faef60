"""Patch sets against the real upstream sglang wheels, and every way `patch check` must fail.

The wheels come from `pip download --no-deps sglang==X` into $OPSCTL_WHEEL_CACHE (default
/var/cache/opsctl-wheels, reused when present), so CI needs PyPI access once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opsctl.config import patchsets
from opsctl.config.profiles import load_profile
from opsctl.config.support import variant_support_problem
from opsctl.core import wheels
from opsctl.core.errors import PatchError
from opsctl.core.paths import project_root
from opsctl.image import lock, patchset
from opsctl.image.context import stage_context
from opsctl.image.plan import plan
from opsctl.image.upstream import members_for, unpack_wheel

VERSIONS = ["0.5.15", "0.5.23"]
BACKEND = "sglang/srt/layers/attention/flashinfer_mla_backend.py"
KERNEL_DEST = "sglang/srt/layers/attention/opsctl_kv_gather_cast.py"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The files each patch set touches, unpacked from the real wheel of its version."""
    trees = {}
    for version in VERSIONS:
        wheel = wheels.fetch("sglang", version)
        dest = tmp_path_factory.mktemp(f"sglang-{version}")
        trees[version] = unpack_wheel(wheel, dest, members_for(version))
    return trees


@pytest.fixture
def tree(upstream: dict[str, Path], tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """A private, writable copy of one version's upstream tree."""
    version = getattr(request, "param", "0.5.15")
    copy = tmp_path / "site-packages"
    shutil.copytree(upstream[version], copy)
    return copy


@pytest.fixture
def project_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the patch sets and kernel under a temporary project root (to edit manifests)."""
    root = tmp_path / "project"
    shutil.copytree(project_root() / "patches", root / "patches")
    kernel = root / "opsctl" / "kernels"
    kernel.mkdir(parents=True)
    shutil.copyfile(
        project_root() / "opsctl/kernels/kv_gather_cast.py", kernel / "kv_gather_cast.py"
    )
    monkeypatch.setenv("OPSCTL_PROJECT_DIR", str(root))
    return root


def edit_manifest(root: Path, version: str, **changes: str) -> None:
    path = root / "patches" / "sglang" / version / "manifest.json"
    data = json.loads(path.read_text())
    data["files"][0].update(changes)
    path.write_text(json.dumps(data, indent=2))


# --- the patch sets apply to the real upstream sources ------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_patch_set_applies_to_its_pinned_release(upstream: dict[str, Path], version: str) -> None:
    manifest = patchsets.load_manifest(version)
    report = patchset.check(upstream[version], version)
    assert report.version == version
    assert [f.path for f in report.patched] == [BACKEND]
    assert report.patched[0].upstream_sha256 == manifest["files"][0]["upstream_sha256"]
    assert report.patched[0].patched_sha256 == manifest["files"][0]["patched_sha256"]
    assert report.new_files == (KERNEL_DEST,)
    assert report.patch_set_sha256 == patchset.patch_set_sha256(version)
    # check() worked on a copy: the upstream file is untouched.
    assert sha256(upstream[version] / BACKEND) == manifest["files"][0]["upstream_sha256"]


@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_records_the_real_wheel(version: str) -> None:
    manifest = patchsets.load_manifest(version)
    wheel = wheels.fetch("sglang", version)
    if wheel.name != manifest["wheel"]["filename"]:
        pytest.skip(f"this interpreter downloads {wheel.name}, the manifest records another wheel")
    assert sha256(wheel) == manifest["wheel"]["sha256"]


@pytest.mark.parametrize("version", VERSIONS)
def test_shipped_kernel_is_the_tested_module(version: str) -> None:
    (entry,) = patchsets.load_manifest(version)["new_files"]
    assert entry["source"] == "opsctl/kernels/kv_gather_cast.py"
    assert entry["sha256"] == sha256(project_root() / entry["source"])


@pytest.mark.parametrize("tree", VERSIONS, indirect=True)
def test_apply_in_place_compiles_then_refuses_a_second_time(tree: Path) -> None:
    version = patchset.tree_version(tree)
    assert version in VERSIONS
    report = patchset.apply(tree, patchsets.patch_set_dir(version))
    manifest = patchsets.load_manifest(version)
    assert sha256(tree / BACKEND) == manifest["files"][0]["patched_sha256"]
    assert sha256(tree / KERNEL_DEST) == sha256(project_root() / "opsctl/kernels/kv_gather_cast.py")
    source = (tree / BACKEND).read_text()
    compile(source, BACKEND, "exec")
    assert "opsctl_kv_gather_cast.key_buffer_for_attention(" in source
    assert ".to(q.dtype)" in source  # the ragged paths keep their own (cheap) casts
    assert report.patched[0].path == BACKEND
    with pytest.raises(PatchError, match="already applied"):
        patchset.apply(tree, patchsets.patch_set_dir(version))


def test_the_staged_build_context_applies_on_its_own(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image build: the context's patchset.py and patch set, run by a python without opsctl
    (-S)."""
    monkeypatch.setenv(lock.LOCK_DIR_ENV, str(tmp_path / "locks"))
    real = load_profile("glm5-nvfp4-rtx6000")
    image = real.image.model_copy(update={"sglang_version": "0.5.15"})
    profile = real.model_copy(update={"image": image})
    context = tmp_path / "context"
    context.mkdir()
    base = lock.BaseResolution("base:1", "sha256:" + "a" * 64, "sha256:" + "a" * 64, "image-id")
    stage_context(plan(profile), context, base, "0" * 64)
    script = context / "opsctl-build" / "patchset.py"
    staged = context / "opsctl-build" / "patches"
    env = {k: v for k, v in os.environ.items() if k != "OPSCTL_PROJECT_DIR"}
    env["OPSCTL_PROJECT_DIR"] = str(tmp_path / "nowhere")  # new files must come from the context
    run = subprocess.run(
        [sys.executable, "-S", str(script), "apply", "--site-packages", str(tree),
         "--patch-dir", str(staged)],
        capture_output=True, text=True, env=env, check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "applies cleanly" in run.stdout
    assert (tree / KERNEL_DEST).is_file()
    again = subprocess.run(
        [sys.executable, "-S", str(script), "apply", "--site-packages", str(tree),
         "--patch-dir", str(staged)],
        capture_output=True, text=True, env=env, check=False,
    )
    assert again.returncode == 3
    assert "already applied" in again.stderr


# --- each failure mode of `patch check` -----------------------------------------------------------


def test_wrong_version(upstream: dict[str, Path]) -> None:
    with pytest.raises(PatchError, match="wrong sglang version.*has 0.5.15.*for 0.5.23"):
        patchset.check(upstream["0.5.15"], "0.5.23")


def test_no_patch_set_for_version() -> None:
    with pytest.raises(PatchError, match="no patch set for sglang 0.0.1"):
        patchsets.patch_set_dir("0.0.1")


def test_not_an_sglang_tree(tmp_path: Path) -> None:
    with pytest.raises(PatchError, match="holds no sglang package"):
        patchset.check(tmp_path, "0.5.15")


def test_modified_upstream_file(tree: Path) -> None:
    with (tree / BACKEND).open("a") as handle:
        handle.write("# local edit\n")
    with pytest.raises(PatchError, match="modified upstream file"):
        patchset.check(tree, "0.5.15")


def test_offset_is_refused(tree: Path, project_copy: Path) -> None:
    text = (tree / BACKEND).read_text()
    (tree / BACKEND).write_text("# one\n# two\n# three\n" + text)
    edit_manifest(project_copy, "0.5.15", upstream_sha256=sha256(tree / BACKEND))
    with pytest.raises(PatchError, match="offset 3 lines"):
        patchset.check(tree, "0.5.15")


def test_context_change_needs_fuzz_and_is_rejected(tree: Path, project_copy: Path) -> None:
    # A context line of a hunk changed: with --fuzz=0 GNU patch rejects instead of fuzzing.
    text = (tree / BACKEND).read_text()
    old = "        self.prefill_cuda_graph_metadata = {}  # For verify\n"
    assert text.count(old) == 1
    (tree / BACKEND).write_text(text.replace(old, old.replace("For verify", "for verify")))
    edit_manifest(project_copy, "0.5.15", upstream_sha256=sha256(tree / BACKEND))
    with pytest.raises(PatchError, match="hunks? rejected"):
        patchset.check(tree, "0.5.15")


def test_removed_line_changed_is_rejected(tree: Path, project_copy: Path) -> None:
    text = (tree / BACKEND).read_text()
    old = "        k_buffer = self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)\n"
    assert text.count(old) == 1
    (tree / BACKEND).write_text(text.replace(old, old.replace("k_buffer =", "k_buffer  =")))
    edit_manifest(project_copy, "0.5.15", upstream_sha256=sha256(tree / BACKEND))
    with pytest.raises(PatchError, match="1 of 1 hunk rejected|hunks? rejected"):
        patchset.check(tree, "0.5.15")


def test_reversed_patch_is_detected(tree: Path, project_copy: Path) -> None:
    # An already-patched file whose hash the manifest does not know: GNU patch sees the reversal.
    patchset.apply(tree, patchsets.patch_set_dir("0.5.15"))
    (tree / KERNEL_DEST).unlink()
    edit_manifest(project_copy, "0.5.15", upstream_sha256=sha256(tree / BACKEND),
                  patched_sha256="0" * 64)
    with pytest.raises(PatchError, match="already applied \\(reversed hunks detected\\)"):
        patchset.check(tree, "0.5.15")


def test_stale_kernel_hash_is_refused(tree: Path, project_copy: Path) -> None:
    kernel = project_copy / "opsctl" / "kernels" / "kv_gather_cast.py"
    kernel.write_text(kernel.read_text() + "\n# edited\n")
    with pytest.raises(PatchError, match="kv_gather_cast.py: sha256"):
        patchset.check(tree, "0.5.15")


def test_patch_set_sha256_covers_diffs_and_new_files(project_copy: Path) -> None:
    before = patchset.patch_set_sha256("0.5.15")
    assert before == patchset.patch_set_sha256("0.5.15")
    kernel = project_copy / "opsctl" / "kernels" / "kv_gather_cast.py"
    kernel.write_text(kernel.read_text() + "\n")
    after_kernel = patchset.patch_set_sha256("0.5.15")
    diff = project_copy / "patches" / "sglang" / "0.5.15" / "flashinfer_mla_backend.py.diff"
    diff.write_text(diff.read_text() + "\n")
    assert len({before, after_kernel, patchset.patch_set_sha256("0.5.15")}) == 3


# --- which version/variant pairs can work ---------------------------------------------------------


def variant(
    version: str = "0.5.15",
    *,
    architecture: str | None = "GlmMoeDsaForCausalLM",
    backend: str | None = "flashinfer",
    kv: str | None = "fp8_e4m3",
    patched: bool = True,
    extra: list[str] | None = None,
) -> dict[str, Any]:
    return {"sglang_version": version, "patched": patched, "architecture": architecture,
            "attention_backend": backend, "kv_cache_dtype": kv, "argv": extra or []}


def support_problem(facts: dict[str, Any]) -> str | None:
    # The argv opsctl would render carries the flags; here `extra` stands in for it.
    return variant_support_problem(**facts)


@pytest.mark.parametrize("version", VERSIONS)
def test_glm5_fp8_flashinfer_is_refused_with_the_manifest_reason(version: str) -> None:
    for patched in (True, False):
        problem = support_problem(variant(version, patched=patched))
        assert problem is not None
        assert "656-byte scaled DSA row" in problem
        assert f"sglang {version}" in problem
        assert problem == patchsets.load_manifest(version)["layout_findings"][0]["reason"]


@pytest.mark.parametrize("version", VERSIONS)
def test_raw_layout_flags_make_the_pair_valid(version: str) -> None:
    decode, prefill = "--dsa-decode-backend", "--dsa-prefill-backend"
    both = [decode, "trtllm", f"{prefill}=trtllm"]
    assert support_problem(variant(version, extra=both)) is None
    assert support_problem(variant(version, extra=[decode, "trtllm"])) is not None
    assert support_problem(
        variant(version, extra=[decode, "trtllm", prefill, "fa3"])) is not None


def test_other_pairs() -> None:
    assert support_problem(variant(kv="bf16")) is None
    assert support_problem(variant(architecture="DeepseekV3ForCausalLM")) is None
    assert support_problem(variant(backend="triton", patched=False)) is None
    problem = support_problem(variant(backend="triton", patched=True))
    assert problem is not None and "only the flashinfer MLA backend" in problem
    problem = support_problem(variant(version="0.5.1", patched=True))
    assert problem is not None and "no patch set for sglang 0.5.1" in problem
    assert support_problem(variant(version="0.5.1", patched=False)) is None
