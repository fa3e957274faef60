"""The simulator's reading of sglang flags and of its behaviour knobs (pure, no server)."""

from __future__ import annotations

import pytest

from opsctl.sim.config import ArgvError, Behaviour, SimArgs, parse_flag_pairs

OPSCTL_ARGV = [
    "--model-path", "/models/GLM-5-NVFP4", "--served-model-name", "glm-5",
    "--host", "0.0.0.0", "--port", "30000", "--tp-size", "8", "--trust-remote-code",
    "--quantization", "modelopt_fp4", "--kv-cache-dtype", "fp8_e4m3",
    "--attention-backend", "flashinfer", "--moe-runner-backend", "flashinfer_cutlass",
    "--disable-shared-experts-fusion", "--mem-fraction-static", "0.85",
    "--chunked-prefill-size", "8192", "--cuda-graph-max-bs-decode", "64",
    "--max-running-requests", "128", "--tool-call-parser", "glm47",
    "--reasoning-parser", "glm45", "--watchdog-timeout", "1800", "--enable-metrics",
    "--extra-metric-labels", '{"variant":"gathercast"}', "--api-key", "KEY",
]


def test_the_flags_opsctl_renders_are_read() -> None:
    args = SimArgs.parse(OPSCTL_ARGV)
    assert args.model_path == "/models/GLM-5-NVFP4"
    assert args.served_model_name == "glm-5"
    assert (args.host, args.port, args.tp_size) == ("0.0.0.0", 30000, 8)
    assert args.api_key == "KEY"
    assert args.enable_metrics is True
    assert args.extra_metric_labels == {"variant": "gathercast"}
    assert args.max_running_requests == 128


def test_server_info_echo_has_json_types_and_resolved_names() -> None:
    echoed = SimArgs.parse(OPSCTL_ARGV).echoed_fields()
    assert echoed["attention_backend"] == "flashinfer"
    assert echoed["kv_cache_dtype"] == "fp8_e4m3"
    assert echoed["mem_fraction_static"] == 0.85
    assert echoed["cuda_graph_max_bs_decode"] == 64
    assert echoed["disable_shared_experts_fusion"] is True
    assert echoed["extra_metric_labels"] == {"variant": "gathercast"}


def test_served_name_defaults_to_model_path_like_sglang() -> None:
    args = SimArgs.parse(["--model", "/models/x"])
    assert args.served_model_name == "/models/x"
    assert (args.host, args.port, args.api_key, args.enable_metrics) == (
        "127.0.0.1", 30000, None, False)


def test_unknown_flags_equals_form_negative_values_and_lists_are_tolerated() -> None:
    raw = parse_flag_pairs(["--chunked-prefill-size", "-1", "--foo=bar", "--flag-only",
                            "--many", "1", "2", "--tp", "4"])
    assert raw == {"chunked_prefill_size": "-1", "foo": "bar", "flag_only": True,
                   "many": ["1", "2"], "tp_size": "4"}


def test_custom_buckets_are_read() -> None:
    args = SimArgs.parse(["--model-path", "m", "--bucket-inter-token-latency", "0.05", "0.1"])
    assert args.bucket_inter_token_latency == [0.05, 0.1]


@pytest.mark.parametrize("argv, message", [
    ([], "--model-path is required"),
    (["stray", "--model-path", "m"], "unexpected argument"),
    (["--model-path", "m", "--port", "x"], "--port needs an integer"),
    (["--model-path", "m", "--extra-metric-labels", "[1]"], "JSON object"),
    (["--model-path", "m", "--extra-metric-labels", "{no"], "not JSON"),
    (["--model-path", "m", "--api-key"], "--api-key needs one value"),
])
def test_unusable_flags_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ArgvError, match=message):
        SimArgs.parse(argv)


def test_behaviour_defaults_and_environment() -> None:
    assert Behaviour.from_env({}) == Behaviour()
    behaviour = Behaviour.from_env({
        "OPSCTL_SIM_TTFT_MS": "10", "OPSCTL_SIM_ITL_MS": "5", "OPSCTL_SIM_ITL_SLOPE_MS": "0.5",
        "OPSCTL_SIM_FAULT": "error_rate", "OPSCTL_SIM_ERROR_RATE": "0.25",
        "OPSCTL_SIM_EXTRA_MODELS": "a, b,", "OPSCTL_SIM_LOAD_SECONDS": "",
    })
    assert behaviour.ttft_seconds() == pytest.approx(0.010)
    assert behaviour.itl_seconds(1) == pytest.approx(0.005)
    assert behaviour.itl_seconds(3) == pytest.approx(0.006)
    assert (behaviour.fault, behaviour.error_rate) == ("error_rate", 0.25)
    assert behaviour.extra_models == ("a", "b")
    assert behaviour.load_seconds == 0.0


def test_slow_first_token_multiplies_ttft_by_20() -> None:
    assert Behaviour(ttft_ms=10, fault="slow_first_token").ttft_seconds() == pytest.approx(0.2)


@pytest.mark.parametrize("patch", [
    {"nope": 1}, {"fault": "explode"}, {"error_rate": 1.5}, {"itl_ms": -1},
    {"itl_ms": "fast"}, {"kv_usage": 2}, {"extra_models": 3}, {"ttft_ms": True},
])
def test_bad_updates_are_refused(patch: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Behaviour().updated(patch)


def test_update_returns_a_new_behaviour_and_kv_usage_resets_with_null() -> None:
    base = Behaviour()
    pinned = base.updated({"kv_usage": 0.95, "itl_ms": 50})
    assert (pinned.kv_usage, pinned.itl_ms, base.itl_ms) == (0.95, 50.0, 20.0)
    assert pinned.updated({"kv_usage": None}).kv_usage is None


def test_speculative_steps_average_the_accept_length() -> None:
    from itertools import islice

    from opsctl.sim.config import Behaviour

    assert list(islice(Behaviour().step_sizes(), 5)) == [1, 1, 1, 1, 1]
    steps = list(islice(Behaviour(spec_accept_length=2.5).step_sizes(), 40))
    assert set(steps) == {2, 3} and sum(steps) / len(steps) == 2.5
    assert Behaviour.from_env({"OPSCTL_SIM_SPEC_ACCEPT_LENGTH": "3"}).spec_accept_length == 3.0
