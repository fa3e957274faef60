"""Per-release facts: the broken variant/release pairs are refused with their source reason."""

from __future__ import annotations

from opsctl.config import releases

GLM = "GlmMoeDsaForCausalLM"
FLASHINFER = ["python3", "-m", "sglang.launch_server", "--attention-backend", "flashinfer"]


def check(**overrides: object) -> releases.Findings:
    args: dict[str, object] = {
        "version": "0.5.23", "architecture": GLM, "argv": FLASHINFER,
        "env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}, "patched": False,
        "cuda_graph_max_bs": None, "max_running_requests": None,
    }
    args.update(overrides)
    return releases.check(**args)  # type: ignore[arg-type]


def test_flashinfer_dsa_on_0523_is_refused_with_the_source_lines() -> None:
    findings = check()
    assert len(findings.errors) == 1
    assert "cuda_graph_config.py:119-123" in findings.errors[0]
    assert "--disable-prefill-cuda-graph" in findings.errors[0]


def test_disabling_the_prefill_graph_makes_flashinfer_acceptable_on_0523() -> None:
    assert check(argv=[*FLASHINFER, "--disable-prefill-cuda-graph"]).errors == []


def test_a_non_dsa_model_is_not_affected() -> None:
    assert check(architecture="LlamaForCausalLM").errors == []


def test_the_native_path_is_accepted() -> None:
    assert (
        check(argv=["python3", "-m", "sglang.launch_server", "--kv-cache-dtype", "fp8_e4m3"]).errors
        == []
    )


def test_patch_with_speculative_decoding_is_accepted() -> None:
    # the 0.5.15 and 0.5.23 patch sets convert the draft and verify rows too (issue 35)
    argv = [*FLASHINFER, "--disable-prefill-cuda-graph", "--speculative-algorithm", "EAGLE"]
    for patched in (True, False):
        assert check(patched=patched, argv=argv).errors == []


def test_running_cap_above_graph_cap_warns() -> None:
    argv = [*FLASHINFER, "--disable-prefill-cuda-graph"]
    findings = check(argv=argv, cuda_graph_max_bs=64, max_running_requests=128)
    assert findings.errors == []
    assert any("65-128 run without CUDA graphs" in warning for warning in findings.warnings)
    assert check(argv=argv, cuda_graph_max_bs=128, max_running_requests=128).warnings == []


def test_an_unknown_release_warns_that_nothing_was_checked() -> None:
    assert any("unchecked" in warning for warning in check(version="9.9.9").warnings)


def test_what_a_variant_computes() -> None:
    assert releases.computes(GLM, FLASHINFER, "0.5.23").startswith("dense MLA")
    assert "flashinfer_sparse_mla" in releases.computes(GLM, ["x"], "0.5.23")


NATIVE = ["python3", "-m", "sglang.launch_server", "--kv-cache-dtype", "fp8_e4m3"]


def test_a_dsa_backend_0523_refuses_on_cuda() -> None:
    findings = check(argv=[*NATIVE, "--dsa-prefill-backend", "triton"])
    assert any(
        "prefill DSA backend triton" in e and "overrides.py:561-567" in e for e in findings.errors
    )


def test_tilelang_on_one_dsa_backend_with_fp8_kv_is_refused_on_0523() -> None:
    one = check(argv=[*NATIVE, "--dsa-decode-backend", "tilelang"])
    assert any("overrides.py:569-575" in error for error in one.errors)
    both = [*NATIVE, "--dsa-prefill-backend", "tilelang", "--dsa-decode-backend", "tilelang"]
    assert check(argv=both).errors == []
    assert (
        check(argv=["x", "--kv-cache-dtype", "bf16", "--dsa-decode-backend", "tilelang"]).errors
        == []
    )
