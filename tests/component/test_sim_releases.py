"""The simulator resolves the checked settings like the pinned release it speaks, from the table
opsctl.verify checks against (patches/sglang/<release>/defaults.json), and prints the patch's
start-up line like the kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from opsctl.config import releases as deploy_releases
from opsctl.kernels import kv_gather_cast as kernel
from opsctl.sim import patchmarker
from opsctl.sim import releases as sim

StartSim = Callable[..., Any]
GLM_ARGS = ["--served-model-name", "glm-5", "--tp-size", "8", "--quantization", "modelopt_fp4"]


def test_the_simulator_knows_the_dsa_models_profile_validation_knows() -> None:
    assert sim.DSA_ARCHITECTURES == deploy_releases.DSA_ARCHITECTURES


def test_the_marker_literals_are_the_kernels() -> None:
    assert patchmarker.MARKER == kernel.MARKER
    assert patchmarker.SWITCH_ENV == kernel.SWITCH_ENV
    assert (patchmarker.ACTIVE, patchmarker.INACTIVE) == (kernel.ACTIVE, kernel.INACTIVE)
    assert patchmarker.REASON_SWITCH_OFF == kernel.REASON_SWITCH_OFF
    assert patchmarker.REASON_POOL_NOT_FP8 == kernel.REASON_POOL_NOT_FP8
    assert patchmarker.ROW_ELEMS == 576
    assert kernel.workspace_bytes(1000) == 1000 * patchmarker.ROW_ELEMS * patchmarker.BF16_BYTES


@pytest.mark.parametrize(
    "settings, env, state, reason",
    [
        (
            {"attention_backend": "flashinfer", "kv_cache_dtype": "fp8_e4m3"},
            {"OPSCTL_KV_GATHER_CAST": "1"},
            "active",
            None,
        ),
        (
            {"attention_backend": "flashinfer", "kv_cache_dtype": "fp8_e4m3"},
            {"OPSCTL_KV_GATHER_CAST": "0"},
            "inactive",
            "switch_off",
        ),
        (
            {"attention_backend": "flashinfer", "kv_cache_dtype": "bfloat16"},
            {"OPSCTL_KV_GATHER_CAST": "1"},
            "inactive",
            "pool_not_fp8_e4m3",
        ),
    ],
)
def test_the_marker_line_parses_with_the_kernels_parser(
        settings: dict[str, str], env: dict[str, str], state: str, reason: str | None) -> None:
    line = patchmarker.marker_line(settings, env, pool_rows=1000)
    assert line is not None
    parsed = kernel.parse_marker("[2026-01-01 00:00:00 TP0] " + line)
    assert parsed is not None
    assert parsed["state"] == state
    assert parsed.get("reason") == reason
    if state == "active":
        assert parsed["workspace_bytes"] == kernel.workspace_bytes(1000)


def test_no_marker_when_the_patched_backend_is_not_used() -> None:
    settings = {"attention_backend": "dsa", "kv_cache_dtype": "fp8_e4m3"}
    assert patchmarker.marker_line(settings, {"OPSCTL_KV_GATHER_CAST": "1"}, 1000) is None


GLM5 = sim.Checkpoint({})


def test_0_5_23_defaults_for_glm5_on_the_simulated_sm120() -> None:
    resolved = sim.resolve("0.5.23", {"model_path": "/m", "tp_size": 8}, GLM5)
    assert resolved == {
        "model_path": "/m",
        "served_model_name": "/m",
        "tp_size": 8,
        "quantization": None,
        "kv_cache_dtype": "fp8_e4m3",
        "attention_backend": "dsa",
        "dsa_prefill_backend": "flashinfer_sparse_mla",
        "dsa_decode_backend": "flashinfer_sparse_mla",
        "page_size": 64,
        "cuda_graph_max_bs": 512,
    }


def test_0_5_15_defaults_for_glm5() -> None:
    resolved = sim.resolve("0.5.15", {"model_path": "/m", "tp_size": 2}, GLM5)
    assert (resolved["attention_backend"], resolved["dsa_prefill_backend"],
            resolved["dsa_decode_backend"], resolved["page_size"],
            resolved["cuda_graph_max_bs"]) == ("dsa", "trtllm", "trtllm", 64, 256)


def test_given_flags_win_except_a_forced_page_size_and_bf16_is_normalised() -> None:
    raw = {"model_path": "/m", "kv_cache_dtype": "bf16", "page_size": 16,
           "dsa_decode_backend": "trtllm", "cuda_graph_max_bs_decode": 64}
    resolved = sim.resolve("0.5.15", raw, GLM5)
    assert resolved["kv_cache_dtype"] == "bfloat16"
    assert resolved["page_size"] == 64
    assert resolved["dsa_decode_backend"] == "trtllm"
    assert resolved["dsa_prefill_backend"] == "flashmla_sparse"  # the bf16 default
    assert resolved["cuda_graph_max_bs"] == 64


def test_0_5_23_caps_the_default_graph_size_at_max_running_requests() -> None:
    raw = {"model_path": "/m", "tp_size": 8, "max_running_requests": 128}
    assert sim.resolve("0.5.23", raw, GLM5)["cuda_graph_max_bs"] == 128
    del raw["max_running_requests"]
    assert sim.resolve("0.5.23", raw, GLM5)["cuda_graph_max_bs"] == 512


def test_a_non_dsa_checkpoint_gets_no_dsa_defaults() -> None:
    other = sim.Checkpoint({"architectures": ["LlamaForCausalLM"]})
    resolved = sim.resolve("0.5.23", {"model_path": "/m", "kv_cache_dtype": "bf16"}, other)
    assert (resolved["attention_backend"], resolved["page_size"], resolved["kv_cache_dtype"]) == (
        None, None, "bf16")


def test_0_5_23_server_info_and_model_info_over_http(sim_server: StartSim) -> None:
    server = sim_server(args=[*GLM_ARGS, "--kv-cache-dtype", "fp8_e4m3",
                              "--attention-backend", "flashinfer",
                              "--cuda-graph-max-bs-decode", "64"])
    info = httpx.get(server.url + "/server_info").json()
    assert info["version"] == "0.5.23"
    assert (info["attention_backend"], info["dsa_prefill_backend"], info["dsa_decode_backend"]) == (
        "flashinfer", "flashinfer_sparse_mla", "flashinfer_sparse_mla")
    assert (info["page_size"], info["cuda_graph_config"]["decode"]["max_bs"]) == (64, 64)
    assert info["cuda_graph_max_bs_decode"] == 64  # the raw input, as resolved_dict reports it
    assert "launch_command" in info
    model = httpx.get(server.url + "/model_info").json()
    assert (model["model_path"], model["served_model_name"]) == ("/models/GLM-5-NVFP4", "glm-5")


def test_0_5_15_server_info_and_model_info_over_http(sim_server: StartSim) -> None:
    server = sim_server(env={sim.RELEASE_ENV: "0.5.15"},
                        args=[*GLM_ARGS, "--kv-cache-dtype", "bf16", "--dsa-decode-backend", "fa3"])
    info = httpx.get(server.url + "/server_info").json()
    assert info["version"] == "0.5.15"
    assert (info["attention_backend"], info["kv_cache_dtype"], info["dsa_prefill_backend"],
            info["dsa_decode_backend"], info["page_size"],
            info["cuda_graph_config"]["decode"]["max_bs"]) == (
        "dsa", "bfloat16", "flashmla_sparse", "fa3", 64, 512)
    assert "launch_command" not in info and "frontend" not in info
    assert info["served_model_name"] == "glm-5"
    model = httpx.get(server.url + "/model_info").json()
    assert "served_model_name" not in model
    assert model["model_path"] == "/models/GLM-5-NVFP4"


def test_an_unknown_release_exits_2(sim_server: StartSim) -> None:
    server = sim_server(env={sim.RELEASE_ENV: "0.4.0"}, wait="none")
    assert server.process.wait(15) == 2
    assert "the simulator speaks sglang 0.5.15, 0.5.23" in server.logs()


def test_misresolve_reports_another_attention_backend(sim_server: StartSim) -> None:
    server = sim_server(args=["--attention-backend", "flashinfer"])
    assert httpx.get(server.url + "/server_info").json()["attention_backend"] == "flashinfer"
    httpx.post(server.url + "/_sim/config", json={"fault": "misresolve"}).raise_for_status()
    assert httpx.get(server.url + "/server_info").json()["attention_backend"] == "triton"
    httpx.post(server.url + "/_sim/config", json={"fault": "none"}).raise_for_status()
    assert httpx.get(server.url + "/server_info").json()["attention_backend"] == "flashinfer"


def test_the_switch_prints_the_active_marker_at_start_up(sim_server: StartSim) -> None:
    on = sim_server(env={"OPSCTL_KV_GATHER_CAST": "1"}, args=["--attention-backend", "flashinfer"])
    off = sim_server(env={"OPSCTL_KV_GATHER_CAST": "0"}, args=["--attention-backend", "flashinfer"])
    states = [[m["state"] for m in map(kernel.parse_marker, s.logs().splitlines()) if m]
              for s in (on, off)]
    assert states == [["active"], ["inactive"]]
