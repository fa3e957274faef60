"""Variants that pin their own sglang release, and the release facts that judge every variant."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from opsctl.config import review
from opsctl.config.profiles import NCCL_P2P_LEVEL_ENV, check_argv, load_profile, release_findings
from opsctl.config.runspec import run_spec
from opsctl.core.errors import EXIT_USAGE, ProfileError
from opsctl.core.paths import PROJECT_DIR_ENV, project_root
from opsctl.deploy.app import dry_run
from opsctl.deploy.view import dry_run_text, profile_text

GLM = "glm5-nvfp4-rtx6000"


def _glm_text() -> str:
    return (project_root() / "deploy" / f"{GLM}.yaml").read_text()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _with_variant(text: str, body: str) -> str:
    """The profile text with one more variant (indented YAML `body`) named `extra`."""
    return text.replace(
        "default_variant: gathercast", f"  extra:\n{body}default_variant: gathercast"
    )


# --- the native variant ---------------------------------------------------------------------------


def test_every_variant_runs_0523_on_one_image_chosen_at_run_time() -> None:
    profile = load_profile(GLM)
    deployments = [profile.resolve(name) for name in profile.variants]
    assert {d.image.sglang_version for d in deployments} == {"0.5.23"}
    assert all(d.image == profile.image for d in deployments)
    assert profile.image.base == "lmsysorg/sglang:v0.5.21-cu130"
    native = profile.resolve("native")
    assert not native.patched and native.env["OPSCTL_KV_GATHER_CAST"] == "0"
    assert profile.resolve("gathercast").env["OPSCTL_KV_GATHER_CAST"] == "1"
    assert len({d.config_hash() for d in deployments}) == len(deployments)


def test_a_release_that_cannot_load_glm5_is_refused_with_the_executed_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A release whose stack record (made by running its transformers' AutoConfig on
    # tests/fixtures/glm5) says the config does not load: here 0.5.15's record, rewritten so.
    project = tmp_path / "project"
    for part in ("deploy", "docker", "patches", "tests/fixtures/glm5"):
        shutil.copytree(project_root() / part, project / part)
    record = project / "patches" / "sglang" / "0.5.15" / "stack.json"
    data = json.loads(record.read_text())
    data["transformers"] = "4.57.1"
    data["models"]["nvidia/GLM-5-NVFP4"].update(
        loads=False, error="ValueError: model type `glm_moe_dsa` unknown. Update it.")
    record.write_text(json.dumps(data))
    monkeypatch.setenv(PROJECT_DIR_ENV, str(project))
    text = _with_variant(_glm_text(), '    image: {sglang_version: "0.5.15", base: "x:1"}\n'
                         "    server: {disable_prefill_cuda_graph: false}\n")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    message = err.value.message
    assert message.startswith(f"{path}:{_line_of(text, '  extra:')}: variant 'extra'")
    assert "transformers 4.57.1" in message and "glm_moe_dsa" in message and "\n" not in message
    assert err.value.exit_code == EXIT_USAGE


def test_native_argv_lets_sglang_0523_choose_the_dsa_path() -> None:
    argv = check_argv(load_profile(GLM).resolve("native"))
    assert not any(a.startswith(("--attention-backend", "--dsa-", "--nsa-")) for a in argv)
    assert "--cuda-graph-max-bs-decode" in argv and "--cuda-graph-max-bs" not in argv
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8_e4m3"


def test_the_running_container_is_labelled_with_the_variants_release() -> None:
    spec = run_spec(load_profile(GLM).resolve("native"), "IMAGE")
    assert spec.labels["opsctl.sglang-version"] == "0.5.23"
    assert spec.env["SGLANG_TIMEOUT_KEEP_ALIVE"] == "900"
    assert spec.env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0"


def test_simulator_native_is_an_overlay_on_the_same_simulator_image() -> None:
    sim = load_profile("sim")
    native = sim.resolve("native")
    assert native.image == sim.image and native.server.attention_backend is None
    assert "--attention-backend" not in check_argv(native)


# --- image overlays -------------------------------------------------------------------------------


@pytest.mark.parametrize(("overlay", "reason"), [
    ("repository: mine/other", "variants.extra.image.repository"),
    ("base: lmsysorg/sglang", "needs an explicit tag"),
])
def test_a_variant_may_not_move_the_repository_or_drop_the_base_tag(
        tmp_path: Path, overlay: str, reason: str) -> None:
    text = _with_variant(_glm_text(), f"    image: {{sglang_version: \"0.5.23\", {overlay}}}\n")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert reason in err.value.message
    line = _line_of(text, f'sglang_version: "0.5.23", {overlay}')
    assert f"{path}:{line}" in err.value.message


def test_a_release_without_a_recorded_parser_is_refused(tmp_path: Path) -> None:
    text = _with_variant(_glm_text(), '    image: {sglang_version: "0.5.7"}\n')
    with pytest.raises(ProfileError, match="no recorded sglang argument parser for version 0.5.7"):
        load_profile(str(_write(tmp_path, text)))


# --- release facts refuse a profile, with the variant's line --------------------------------------


def test_flashinfer_on_0523_for_glm5_is_refused_at_the_variants_line(tmp_path: Path) -> None:
    # Inherits --attention-backend flashinfer from the profile; 0.5.23 crashes at start-up then.
    text = _with_variant(_glm_text(), "    server: {disable_prefill_cuda_graph: false}\n")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    message = err.value.message
    assert message.startswith(f"{path}:{_line_of(text, '  extra:')}: variant 'extra'")
    assert "cuda_graph_config.py:119-123" in message and "\n" not in message
    assert err.value.exit_code == EXIT_USAGE


def test_disabling_the_prefill_graph_lets_flashinfer_run_on_0523() -> None:
    profile = load_profile(GLM)
    for name in ("baseline", "gathercast", "bf16kv", "bf16kv-mtp"):
        argv = check_argv(profile.resolve(name))
        assert "--attention-backend" in argv and "--disable-prefill-cuda-graph" in argv, name
    assert "--disable-prefill-cuda-graph" not in check_argv(profile.resolve("native"))


def test_deep_gemm_on_with_its_backend_off_is_refused(tmp_path: Path) -> None:
    text = _with_variant(_glm_text(), "    server: {extra_args: [--fp8-gemm-backend, deep_gemm]}\n")
    with pytest.raises(ProfileError, match="fp8_utils.py:869-874"):
        load_profile(str(_write(tmp_path, text)))


def test_deep_gemm_left_on_sm120_warns(tmp_path: Path) -> None:
    text = _glm_text().replace('    SGLANG_ENABLE_JIT_DEEPGEMM: "0"\n', "")
    profile = load_profile(str(_write(tmp_path, text)))
    warnings = release_findings(profile.resolve("gathercast")).warnings
    assert any("configurer.py:17-55" in w and "SGLANG_ENABLE_JIT_DEEPGEMM" in w for w in warnings)


def test_the_patch_with_speculative_decoding_loads(tmp_path: Path) -> None:
    # issue 35: the 0.5.23 patch set converts the draft and verify rows too, so it is not refused
    text = _glm_text().replace(
        "    requires_patch: true\n",
        "    requires_patch: true\n    server: {speculative_algorithm: EAGLE}\n", 1)
    deployment = load_profile(str(_write(tmp_path, text))).resolve("gathercast")
    assert deployment.patched and release_findings(deployment).errors == []


def test_a_dsa_backend_the_release_refuses_on_cuda(tmp_path: Path) -> None:
    text = _with_variant(
        _glm_text(), "    server: {attention_backend: null, dsa_decode_backend: triton}\n"
    )
    with pytest.raises(ProfileError, match="decode DSA backend triton.*overrides.py:561-567"):
        load_profile(str(_write(tmp_path, text)))


def test_simulator_images_are_not_judged_by_release_facts(tmp_path: Path) -> None:
    from simprofile import sim_without_the_real_profiles_dsa_settings as sim_wrong

    # flashinfer on 0.5.23 without the prefill-graph flag: a real sglang image would be refused
    sim = load_profile(str(sim_wrong(tmp_path)))
    deployment = sim.resolve("baseline")
    assert release_findings(deployment).errors == []
    real = deployment.model_copy(
        update={"image": deployment.image.model_copy(update={"kind": "sglang"})}
    )
    assert any("cuda_graph_config.py" in error for error in release_findings(real).errors)


# --- warnings: shown, never refusing --------------------------------------------------------------


def test_the_shipped_profiles_raise_no_warning() -> None:
    for name in ("sim", GLM):
        profile = load_profile(name)
        assert all(not release_findings(profile.resolve(v)).warnings for v in profile.variants), (
            name
        )


def test_running_cap_above_the_graph_cap_warns_in_show_and_dry_run(tmp_path: Path) -> None:
    text = _glm_text().replace("  max_running_requests: 64 ", "  max_running_requests: 128")
    profile = load_profile(str(_write(tmp_path, text)))  # a warning does not refuse
    shown = review.show(profile, "gathercast")
    assert any("65-128 run without CUDA graphs" in w for w in shown.variants[0].warnings)
    assert "#   warning: max_running_requests 128 > cuda_graph_max_bs 64" in profile_text(shown)
    plan = dry_run(profile.resolve("gathercast"), lambda _: "IMAGE")
    assert "\n# warning: max_running_requests 128" in dry_run_text(plan)


# --- NCCL's P2P level -----------------------------------------------------------------------------


def test_nccl_p2p_level_is_rendered_from_the_typed_field(tmp_path: Path) -> None:
    text = _glm_text().replace("  nccl_p2p_level: null", "  nccl_p2p_level: SYS")
    profile = load_profile(str(_write(tmp_path, text)))
    assert all(profile.resolve(v).env[NCCL_P2P_LEVEL_ENV] == "SYS" for v in profile.variants)
    shipped = load_profile(GLM).resolve("gathercast")
    assert profile.resolve("gathercast").config_hash() != shipped.config_hash()


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("  nccl_p2p_level: null", "  nccl_p2p_level: ALL", "container.nccl_p2p_level"),
        (
            '    TORCH_CUDA_ARCH_LIST: "12.0a"',
            '    NCCL_P2P_LEVEL: SYS\n    TORCH_CUDA_ARCH_LIST: "12.0a"',
            "NCCL_P2P_LEVEL is rendered from container.nccl_p2p_level",
        ),
    ],
)
def test_nccl_p2p_level_is_typed_and_never_set_by_hand(
        tmp_path: Path, old: str, new: str, reason: str) -> None:
    with pytest.raises(ProfileError, match=reason):
        load_profile(str(_write(tmp_path, _glm_text().replace(old, new))))
