"""opsctl.verify's pure parts: expectations from argv and release facts, the comparison, the
patch's start-up line, bounded fetching, the mismatch error and checkpoint identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from opsctl.core.checkpoint import checkpoint_id, compare_checkpoints
from opsctl.core.errors import EXIT_LAUNCH, LaunchError, ServerUnreachable, UsageError
from opsctl.kernels.kv_gather_cast import format_marker, parse_marker
from opsctl.verify import checks
from opsctl.verify.app import VerifyMismatch, VerifyResult, fetch_json, raise_on_mismatch
from opsctl.verify.facts import FieldFact, facts_for

GLM = "GlmMoeDsaForCausalLM"
BASE = ["--model-path", "/models/m", "--tp-size", "8", "--quantization", "modelopt_fp4"]


def _facts(version: str) -> dict[str, FieldFact]:
    facts = facts_for(version)
    assert facts is not None, version
    return facts


def expect_of(version: str, argv: list[str], arch: str | None = GLM,
              expect: dict[str, Any] | None = None) -> dict[str, checks.Expectation]:
    return checks.expectations(_facts(version), argv, arch, expect)


def test_flags_set_the_expectation_and_the_served_name_defaults_to_the_model_path() -> None:
    got = expect_of("0.5.23", [*BASE, "--attention-backend=flashinfer"])
    assert (got["tp_size"].value, got["attention_backend"].value) == (8, "flashinfer")
    assert got["attention_backend"].source == "flag --attention-backend"
    assert (got["served_model_name"].value, got["served_model_name"].known) == ("/models/m", True)
    assert got["tp_size"].value == 8 and isinstance(got["tp_size"].value, int)


def test_a_later_flag_wins_like_argparse() -> None:
    flags = checks.flag_values(["--tp-size", "4", "--tp-size", "8", "--x=1", "--bare"])
    assert flags == {"--tp-size": "8", "--x": "1"}


def test_fixed_defaults_of_0_5_15_for_a_dsa_model() -> None:
    got = expect_of("0.5.15", [*BASE, "--kv-cache-dtype", "fp8_e4m3"])
    assert got["attention_backend"].value == "dsa"
    assert not got["dsa_prefill_backend"].known  # FP8 KV: depends on the SM
    assert got["page_size"].value == 64
    assert "overrides.py:374-386" in got["page_size"].source


def test_bf16_is_normalised_and_a_forced_page_size_ignores_the_flag() -> None:
    got = expect_of("0.5.15", [*BASE, "--kv-cache-dtype", "bf16", "--page-size", "16"])
    assert got["kv_cache_dtype"].value == "bfloat16"
    assert got["page_size"].value == 64
    assert "whatever --page-size says" in got["page_size"].source
    assert got["dsa_prefill_backend"].value == "flashmla_sparse"
    assert not got["dsa_decode_backend"].known  # bf16 decode default depends on the SM


def test_hardware_dependent_defaults_are_unknown_with_the_reason() -> None:
    got = expect_of("0.5.23", [*BASE, "--kv-cache-dtype", "fp8_e4m3"])
    for name in ("dsa_prefill_backend", "dsa_decode_backend", "page_size", "cuda_graph_max_bs"):
        assert not got[name].known, name
    assert "flashinfer_sparse_mla for GLM on SM12x" in got["dsa_decode_backend"].source
    assert "expect.dsa_decode_backend" in got["dsa_decode_backend"].source
    absent_kv = expect_of("0.5.23", BASE)
    assert not absent_kv["kv_cache_dtype"].known
    assert "kv_cache_dtype, which is not known" in absent_kv["dsa_prefill_backend"].source


def test_the_variants_expect_settles_a_hardware_dependent_field() -> None:
    got = expect_of("0.5.23", BASE, expect={"dsa_decode_backend": "flashinfer_sparse_mla"})
    assert (got["dsa_decode_backend"].value, got["dsa_decode_backend"].source) == (
        "flashinfer_sparse_mla", "the variant's expect")


def test_other_architectures_get_no_dsa_defaults() -> None:
    got = expect_of("0.5.23", [*BASE, "--kv-cache-dtype", "bf16"], arch="LlamaForCausalLM")
    assert got["kv_cache_dtype"].value == "bf16"  # as given: the bf16 alias is DSA-only
    assert not got["attention_backend"].known
    assert "DSA models only" in got["attention_backend"].source


SERVER = {"version": "0.5.23", "tp_size": 8, "attention_backend": "triton",
          "kv_cache_dtype": "fp8_e4m3", "cuda_graph_config": {"decode": {"max_bs": 64}}}
MODEL = {"model_path": "/models/m", "served_model_name": "/models/m"}


def test_compare_finds_ok_mismatch_and_absent_fields() -> None:
    facts = _facts("0.5.23")
    argv = [*BASE, "--attention-backend", "flashinfer", "--kv-cache-dtype", "fp8_e4m3",
            "--cuda-graph-max-bs-decode", "64"]
    found = {c.field: c for c in checks.compare(facts, expect_of("0.5.23", argv), SERVER, MODEL)}
    assert found["tp_size"].status == "ok"
    assert found["cuda_graph_max_bs"].status == "ok"
    assert found["served_model_name"].status == "ok"
    assert (found["attention_backend"].status, found["attention_backend"].resolved) == (
        "mismatch", "triton")
    assert found["quantization"].status == "unknown"
    assert "absent" in found["quantization"].reason
    assert found["page_size"].status == "unknown"


def test_the_server_release_is_checked_against_the_pin() -> None:
    assert checks.version_check("0.5.23", SERVER).status == "ok"
    assert checks.version_check("0.5.15", SERVER).status == "mismatch"
    assert checks.version_check("0.5.15", {}).status == "unknown"


ACTIVE_LINE = "[TP0] " + format_marker("active", workspace_bytes=10, rows=5)
SWITCH_OFF = "[TP0] " + format_marker("inactive", reason="switch_off")


@pytest.mark.parametrize("patched, log, status, resolved", [
    (True, f"start\n{ACTIVE_LINE}\n{ACTIVE_LINE}\n", "ok", "active (2 lines)"),
    (True, "start\n", "mismatch", "no marker line"),
    (True, f"{ACTIVE_LINE}\n{SWITCH_OFF}\n", "mismatch",
     "active on 1 of 2 lines, inactive: reason=switch_off"),
    (False, f"{SWITCH_OFF}\n", "ok", "inactive: reason=switch_off"),
    (False, "start\n", "ok", "no marker line"),
    (False, f"{ACTIVE_LINE}\n", "mismatch", "active (1 line)"),
])
def test_patch_marker_check(patched: bool, log: str, status: str, resolved: str) -> None:
    found = checks.patch_check(patched, log, parse_marker)
    assert (found.status, found.resolved) == (status, resolved)


def test_no_log_leaves_the_patch_check_unknown_not_passed() -> None:
    found = checks.patch_check(True, None, parse_marker)
    assert found.status == "unknown"
    assert "--log" in found.reason


def result_with(*found: checks.FieldCheck) -> VerifyResult:
    return VerifyResult("http://h:1", "sim", "gathercast", "0.5.23", list(found))


def test_mismatches_raise_one_launch_error_naming_each_field() -> None:
    bad = checks.FieldCheck("attention_backend", "flashinfer", "triton", "mismatch", "flag", "w")
    also = checks.FieldCheck("page_size", 64, 1, "mismatch", "default", "w")
    with pytest.raises(VerifyMismatch) as caught:
        raise_on_mismatch(result_with(bad, also))
    assert caught.value.exit_code == EXIT_LAUNCH
    assert "attention_backend: expected flashinfer, resolved triton; page_size: expected 64, " \
           "resolved 1" in caught.value.message
    assert "\n" not in caught.value.message and caught.value.hint


def test_unknown_alone_does_not_fail() -> None:
    unknown = checks.FieldCheck("page_size", None, 64, "unknown", "", "w", "why")
    result = result_with(unknown)
    raise_on_mismatch(result)
    assert result.ok and result.unknown == [unknown]
    assert json.loads(json.dumps(result.to_json()))["checks"][0]["reason"] == "why"


def client_for(handler: Any) -> httpx.Client:
    return httpx.Client(base_url="http://sglang.test", transport=httpx.MockTransport(handler))


def test_fetch_json_is_bounded_and_maps_errors_to_exit_4() -> None:
    big = client_for(lambda _: httpx.Response(200, content=b"[" + b"1," * 5000 + b"1]"))
    with pytest.raises(LaunchError, match="exceeds 100 bytes"):
        fetch_json(big, "/server_info", 5, max_bytes=100)
    with pytest.raises(LaunchError, match="HTTP 401") as caught:
        fetch_json(client_for(lambda _: httpx.Response(401)), "/server_info", 5)
    assert "OPSCTL_API_KEY" in caught.value.hint
    with pytest.raises(LaunchError, match="not a JSON object"):
        fetch_json(client_for(lambda _: httpx.Response(200, content=b"[1]")), "/model_info", 5)
    assert fetch_json(client_for(lambda _: httpx.Response(200, json={"a": 1})), "/x", 5) == {"a": 1}


def test_fetch_json_from_nothing_is_server_unreachable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(ServerUnreachable):
        fetch_json(client_for(refuse), "/server_info", 5)


def test_checkpoint_id_hashes_config_and_index_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"architectures": ["GlmMoeDsaForCausalLM"]}')
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    (tmp_path / "model-00001.safetensors").write_bytes(b"weights are not hashed")
    first = checkpoint_id(tmp_path)
    assert sorted(first.files) == ["config.json", "model.safetensors.index.json"]
    assert checkpoint_id(tmp_path) == first
    assert compare_checkpoints(first, first.to_json()).status == "same"
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"x": "y"}}')
    second = checkpoint_id(tmp_path)
    compared = compare_checkpoints(first.to_json(), second)
    assert (compared.status, compared.differing) == ("different", ["model.safetensors.index.json"])
    assert compare_checkpoints(first, None).status == "unknown"


def test_checkpoint_id_needs_a_config(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no config.json"):
        checkpoint_id(tmp_path)
