"""/metrics: sglang 0.5.23's names, types, labels and buckets, observed from real requests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# The sim_server fixture (tests/conftest.py) returns a SimServer: .url, .process, .logs().
StartSim = Callable[..., Any]
CHAT = "/v1/chat/completions"
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
               0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0]
TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
TOKENIZER_LABELS = {"model_name": "glm-5", "engine_type": "unified", "variant": "gathercast"}
SCHEDULER_LABELS = {**TOKENIZER_LABELS, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
ARGS = ["--served-model-name", "glm-5", "--enable-metrics",
        "--extra-metric-labels", '{"variant":"gathercast"}']
FAST = {"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"}


def scrape(url: str) -> dict[str, tuple[str, list[Sample]]]:
    response = httpx.get(url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(response.text)}


def only(samples: list[Sample], name: str, **labels: str) -> float:
    matching = [s for s in samples if s.name == name and
                all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matching) == 1, (name, labels, samples)
    return float(matching[0].value)


def run_requests(url: str) -> tuple[int, int]:
    """Two streamed and one plain chat request; returns (completion, prompt) token totals."""
    completion = prompt = 0
    for stream in (True, True, False):
        body = {"model": "glm-5", "messages": [{"role": "user", "content": f"hi {stream}"}],
                "max_tokens": 5, "ignore_eos": True, "temperature": 0, "stream": stream,
                "stream_options": {"include_usage": True}}
        response = httpx.post(url + CHAT, json=body)
        if stream:
            usage_line = [line for line in response.text.splitlines() if '"usage"' in line][-1]
            usage = httpx.Response(200, content=usage_line[len("data: "):]).json()["usage"]
        else:
            usage = response.json()["usage"]
        completion += usage["completion_tokens"]
        prompt += usage["prompt_tokens"]
    return completion, prompt


def test_latency_histograms_with_real_names_labels_and_buckets(sim_server: StartSim) -> None:
    sim = sim_server(env=FAST, args=ARGS)
    completion, prompt = run_requests(sim.url)
    families = scrape(sim.url)

    kind, samples = families["sglang:inter_token_latency_seconds"]
    assert kind == "histogram"
    buckets = [s for s in samples if s.name.endswith("_bucket")]
    assert [float(s.labels["le"]) for s in buckets][:-1] == ITL_BUCKETS
    assert {k: v for k, v in buckets[0].labels.items() if k != "le"} == TOKENIZER_LABELS
    assert only(samples, "sglang:inter_token_latency_seconds_count") == 3 * 4

    kind, samples = families["sglang:time_to_first_token_seconds"]
    assert kind == "histogram"
    le = [float(s.labels["le"]) for s in samples
          if s.name.endswith("_bucket") and s.labels["is_streaming"] == "true"]
    assert le[:-1] == TTFT_BUCKETS
    assert only(samples, "sglang:time_to_first_token_seconds_count", is_streaming="true") == 2
    assert only(samples, "sglang:time_to_first_token_seconds_count", is_streaming="false") == 1

    for name in ("sglang:request_time_per_output_token_seconds",
                 "sglang:e2e_request_latency_seconds"):
        kind, samples = families[name]
        assert kind == "histogram", name
        assert only(samples, name + "_count", is_streaming="true", **TOKENIZER_LABELS) == 2

    kind, samples = families["sglang:generation_tokens"]
    assert kind == "counter"
    total = sum(s.value for s in samples if s.name == "sglang:generation_tokens_total")
    assert total == completion
    kind, samples = families["sglang:prompt_tokens"]
    assert sum(s.value for s in samples if s.name == "sglang:prompt_tokens_total") == prompt
    kind, samples = families["sglang:num_requests"]
    assert only(samples, "sglang:num_requests_total", is_streaming="true") == 2
    assert not any(s.name.endswith("_created") for _, (_, ss) in families.items() for s in ss)


def test_scheduler_gauges_and_the_kv_usage_knob(sim_server: StartSim) -> None:
    sim = sim_server(env=FAST, args=[*ARGS, "--context-length", "8192"])
    families = scrape(sim.url)
    for name in ("num_running_reqs", "num_queue_reqs", "token_usage", "gen_throughput",
                 "cache_hit_rate", "max_total_num_tokens", "context_len"):
        kind, samples = families[f"sglang:{name}"]
        assert kind == "gauge", name
        assert samples[0].labels == SCHEDULER_LABELS, name
    assert only(families["sglang:context_len"][1], "sglang:context_len") == 8192
    assert only(families["sglang:token_usage"][1], "sglang:token_usage") == 0.0

    httpx.post(sim.url + "/_sim/config", json={"kv_usage": 0.95}).raise_for_status()
    assert only(scrape(sim.url)["sglang:token_usage"][1], "sglang:token_usage") == 0.95
    httpx.post(sim.url + "/_sim/config", json={"kv_usage": None}).raise_for_status()
    assert only(scrape(sim.url)["sglang:token_usage"][1], "sglang:token_usage") == 0.0


def test_running_requests_are_visible_while_streaming(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "200"}, args=ARGS)
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 50,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", sim.url + CHAT, json=body) as response:
        next(response.iter_lines())
        families = scrape(sim.url)
        assert only(families["sglang:num_running_reqs"][1], "sglang:num_running_reqs") == 1
        assert only(families["sglang:token_usage"][1], "sglang:token_usage") > 0


def test_aborted_streams_are_counted(sim_server: StartSim) -> None:
    sim = sim_server(env={**FAST, "OPSCTL_SIM_FAULT": "stream_cut"}, args=ARGS)
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 20, "stream": True}
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(sim.url + CHAT, json=body)
    samples = scrape(sim.url)["sglang:num_aborted_requests"][1]
    assert only(samples, "sglang:num_aborted_requests_total", **TOKENIZER_LABELS) == 1


def test_http_request_metrics_have_endpoint_labels(sim_server: StartSim) -> None:
    sim = sim_server(args=ARGS)

    def counts() -> tuple[float, float]:
        # The readiness probe may already have listed the models: count what one GET adds.
        families = scrape(sim.url)
        requests = only(families["sglang:http_requests"][1], "sglang:http_requests_total",
                        endpoint="/v1/models", method="GET")
        responses = only(families["sglang:http_responses"][1], "sglang:http_responses_total",
                         endpoint="/v1/models", method="GET", status_code="200")
        return requests, responses

    httpx.get(sim.url + "/v1/models")
    before = counts()
    httpx.get(sim.url + "/v1/models")
    after = counts()
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)


def test_no_metrics_endpoint_without_enable_metrics(sim_server: StartSim) -> None:
    sim = sim_server()
    assert httpx.get(sim.url + "/metrics").status_code == 404


def test_gzip_when_asked(sim_server: StartSim) -> None:
    sim = sim_server(args=ARGS)
    response = httpx.get(sim.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert response.headers["content-encoding"] == "gzip"
    assert "sglang:token_usage" in response.text


def test_requests_beyond_max_running_requests_queue(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "100"},
                     args=[*ARGS, "--max-running-requests", "1"])
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 30,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", sim.url + CHAT, json=body) as first, \
            httpx.stream("POST", sim.url + CHAT, json=body) as second:
        next(first.iter_lines())
        assert second.status_code == 200
        families = scrape(sim.url)
        assert only(families["sglang:num_running_reqs"][1], "sglang:num_running_reqs") == 1
        assert only(families["sglang:num_queue_reqs"][1], "sglang:num_queue_reqs") == 1
