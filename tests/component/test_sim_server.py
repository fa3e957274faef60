"""The simulator over real HTTP on loopback: lifecycle, model names, generations, auth."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

# The sim_server fixture (tests/conftest.py) returns a SimServer: .url, .process, .logs().
StartSim = Callable[..., Any]
READY_LINE = "The server is fired up and ready to roll!"
CHAT = "/v1/chat/completions"


def sse_payloads(text: str) -> list[Any]:
    """The ``data:`` payloads of an SSE body, JSON-decoded except ``[DONE]``."""
    out: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def chat_body(content: str = "Say something.", **extra: Any) -> dict[str, Any]:
    return {"model": "glm-5", "messages": [{"role": "user", "content": content}],
            "temperature": 0, **extra}


def test_port_is_closed_while_loading_then_serves(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_LOAD_SECONDS": "1.5"}, wait="none")
    with pytest.raises(httpx.ConnectError):
        httpx.get(sim.url + "/health", timeout=2)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            assert httpx.get(sim.url + "/health", timeout=2).status_code == 200
            break
        except httpx.ConnectError:
            time.sleep(0.05)
    else:
        pytest.fail("simulator never started listening")
    assert "Load weight begin" in sim.logs()


def test_warmup_answers_503_but_lists_models_then_becomes_ready(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_WARMUP_SECONDS": "1.5"},
                     args=["--served-model-name", "glm-5"], wait="listen")
    for path in ("/health", "/health_generate", "/ready"):
        assert httpx.get(sim.url + path).status_code == 503, path
    assert httpx.post(sim.url + CHAT, json=chat_body()).status_code == 503
    models = httpx.get(sim.url + "/v1/models")
    assert models.status_code == 200
    assert [m["id"] for m in models.json()["data"]] == ["glm-5"]
    assert READY_LINE not in sim.logs()
    deadline = time.monotonic() + 15
    while httpx.get(sim.url + "/health_generate").status_code != 200:
        assert time.monotonic() < deadline, "never became ready"
        time.sleep(0.05)
    assert httpx.get(sim.url + "/ready").status_code == 200
    deadline = time.monotonic() + 5
    while READY_LINE not in sim.logs():
        assert time.monotonic() < deadline, sim.logs()
        time.sleep(0.05)


def test_models_default_to_model_path_and_list_extra_models(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_EXTRA_MODELS": "draft,other"},
                     args=["--context-length", "4096"])
    body = httpx.get(sim.url + "/v1/models").json()
    assert body["object"] == "list"
    first = body["data"][0]
    assert first["id"] == "/models/GLM-5-NVFP4"
    assert {k: first[k] for k in ("object", "owned_by", "root", "parent", "max_model_len")} == {
        "object": "model", "owned_by": "sglang", "root": "/models/GLM-5-NVFP4",
        "parent": None, "max_model_len": 4096}
    assert [m["id"] for m in body["data"]] == ["/models/GLM-5-NVFP4", "draft", "other"]
    assert httpx.get(sim.url + "/v1/models/draft").json()["id"] == "draft"
    missing = httpx.get(sim.url + "/v1/models/nope")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


def test_model_info_and_server_info(sim_server: StartSim) -> None:
    sim = sim_server(args=["--served-model-name", "glm-5", "--tp-size", "8",
                           "--kv-cache-dtype", "fp8_e4m3", "--attention-backend", "flashinfer",
                           "--reasoning-parser", "glm45", "--enable-metrics",
                           "--extra-metric-labels", '{"variant":"gathercast"}'])
    for path in ("/model_info", "/get_model_info"):
        info = httpx.get(sim.url + path).json()
        assert info["model_path"] == "/models/GLM-5-NVFP4"
        assert info["served_model_name"] == "glm-5"
        assert info["tokenizer_path"] == "/models/GLM-5-NVFP4"
        assert info["is_generation"] is True
        assert info["reasoning_parser"] == "glm45"
        assert info["weight_version"] == "default"
    for path in ("/server_info", "/get_server_info"):
        server = httpx.get(sim.url + path).json()
        assert server["version"] == "0.5.23"
        assert server["tp_size"] == 8
        assert server["attention_backend"] == "flashinfer"
        assert server["kv_cache_dtype"] == "fp8_e4m3"
        assert server["extra_metric_labels"] == {"variant": "gathercast"}
        assert "--tp-size 8" in server["launch_command"]
        assert server["internal_states"][0]["tp_size"] == 8


def test_chat_non_streaming_with_usage(sim_server: StartSim) -> None:
    sim = sim_server(args=["--served-model-name", "glm-5"])
    response = httpx.post(sim.url + CHAT, json=chat_body(max_tokens=7))
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "glm-5"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length"
    assert len(choice["message"]["content"].split()) == 7
    usage = body["usage"]
    assert usage["completion_tokens"] == 7
    assert usage["total_tokens"] == usage["prompt_tokens"] + 7
    assert body["metadata"] == {"weight_version": "default"}


def test_chat_streaming_chunks_usage_and_done(sim_server: StartSim) -> None:
    sim = sim_server()
    response = httpx.post(sim.url + CHAT, json=chat_body(
        max_tokens=6, stream=True, stream_options={"include_usage": True}))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    chunks = payloads[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {
        "reasoning_content": None, "role": "assistant", "content": ""}
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 6
    finish = chunks[-2]["choices"][0]
    assert finish["finish_reason"] == "length"
    assert finish["delta"] == {"reasoning_content": None}
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 6
    streamed = "".join(c["choices"][0]["delta"]["content"] for c in content)
    plain = httpx.post(sim.url + CHAT, json=chat_body(max_tokens=6)).json()
    assert streamed == plain["choices"][0]["message"]["content"]
    assert usage_chunk["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]


def test_streaming_without_include_usage_has_no_usage_chunk(sim_server: StartSim) -> None:
    sim = sim_server()
    payloads = sse_payloads(httpx.post(
        sim.url + CHAT, json=chat_body(max_tokens=3, stream=True)).text)
    assert all("usage" not in p for p in payloads[:-1])


def test_stop_finish_counts_eos_without_text(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_ITL_MS": "1", "OPSCTL_SIM_TTFT_MS": "1"})
    body = httpx.post(sim.url + CHAT, json=chat_body(max_tokens=4000), timeout=30).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["matched_stop"] is not None
    words = len(choice["message"]["content"].split())
    assert body["usage"]["completion_tokens"] == words + 1


def test_completions_streaming_and_not(sim_server: StartSim) -> None:
    sim = sim_server()
    plain = httpx.post(sim.url + "/v1/completions",
                       json={"prompt": "Once upon", "max_tokens": 5, "temperature": 0}).json()
    assert plain["object"] == "text_completion"
    assert plain["choices"][0]["finish_reason"] == "length"
    assert plain["usage"]["completion_tokens"] == 5
    payloads = sse_payloads(httpx.post(sim.url + "/v1/completions", json={
        "prompt": "Once upon", "max_tokens": 5, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}}).text)
    assert payloads[-1] == "[DONE]"
    token_chunks = [p for p in payloads[:-1] if p["choices"]]
    assert len(token_chunks) == 5
    assert token_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["text"] for c in token_chunks) == plain["choices"][0]["text"]
    assert payloads[-2]["usage"] == {"prompt_tokens": plain["usage"]["prompt_tokens"],
                                     "total_tokens": plain["usage"]["total_tokens"],
                                     "completion_tokens": 5, "reasoning_tokens": 0}


def test_default_max_tokens_of_completions_is_16(sim_server: StartSim) -> None:
    sim = sim_server()
    body = httpx.post(sim.url + "/v1/completions",
                      json={"prompt": "x", "temperature": 0, "ignore_eos": True}).json()
    assert body["usage"]["completion_tokens"] == 16


def test_native_generate_with_meta_info(sim_server: StartSim) -> None:
    sim = sim_server()
    request = {"text": "The capital of France is",
               "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    out = httpx.post(sim.url + "/generate", json=request).json()
    assert len(out["output_ids"]) == 4
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 4}
    assert meta["completion_tokens"] == 4
    assert meta["prompt_tokens"] == 5
    assert meta["e2e_latency"] > 0
    payloads = sse_payloads(httpx.post(sim.url + "/generate",
                                       json={**request, "stream": True}).text)
    assert payloads[-1] == "[DONE]"
    assert [p["meta_info"]["completion_tokens"] for p in payloads[:-1]] == [1, 2, 3, 4]
    assert payloads[-2]["text"] == out["text"]


def test_greedy_is_deterministic_and_sampling_is_not(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_ITL_MS": "1", "OPSCTL_SIM_TTFT_MS": "1"})

    def text(**extra: Any) -> str:
        body = httpx.post(sim.url + CHAT, json={**chat_body("Same prompt", max_tokens=12),
                                                **extra}).json()
        return str(body["choices"][0]["message"]["content"])

    assert text() == text()
    assert text() != text(messages=[{"role": "user", "content": "Other prompt"}])
    sampled = {text(temperature=0.8) for _ in range(3)}
    assert len(sampled) > 1
    assert text(temperature=0.8, seed=7) == text(temperature=0.8, seed=7)


def test_bad_requests_answer_400(sim_server: StartSim) -> None:
    sim = sim_server()
    empty = httpx.post(sim.url + CHAT, json={"messages": []})
    assert empty.status_code == 400
    assert empty.json()["message"] == "Messages cannot be empty."
    assert httpx.post(sim.url + CHAT, content=b"{not json").status_code == 400
    assert httpx.post(sim.url + "/v1/completions", json={"prompt": ""}).status_code == 400
    assert httpx.post(sim.url + CHAT, json=chat_body(max_tokens=0)).status_code == 400
    assert httpx.get(sim.url + "/nope").status_code == 404
    assert httpx.get(sim.url + CHAT).status_code == 405


def test_api_key_protects_all_but_health_ready_metrics_and_admin(sim_server: StartSim) -> None:
    sim = sim_server(args=["--api-key", "sekret", "--enable-metrics"])
    for path in ("/v1/models", "/model_info", "/server_info"):
        denied = httpx.get(sim.url + path)
        assert denied.status_code == 401, path
        assert denied.json() == {"error": "Unauthorized"}
        wrong = httpx.get(sim.url + path, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = httpx.get(sim.url + path, headers={"Authorization": "Bearer sekret"})
        assert ok.status_code == 200, path
    assert httpx.post(sim.url + CHAT, json=chat_body(max_tokens=2)).status_code == 401
    for path in ("/health", "/health_generate", "/ready", "/metrics", "/_sim/config"):
        assert httpx.get(sim.url + path).status_code == 200, path


def test_without_api_key_everything_is_open(sim_server: StartSim) -> None:
    sim = sim_server()
    assert httpx.get(sim.url + "/server_info").status_code == 200
    assert httpx.post(sim.url + CHAT, json=chat_body(max_tokens=2)).status_code == 200


def test_admin_config_round_trip_and_validation(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_ITL_MS": "3"})
    assert httpx.get(sim.url + "/_sim/config").json()["itl_ms"] == 3.0
    changed = httpx.post(sim.url + "/_sim/config",
                         json={"itl_ms": 5, "extra_models": "x,y"}).json()
    assert (changed["itl_ms"], changed["extra_models"]) == (5.0, ["x", "y"])
    ids = [m["id"] for m in httpx.get(sim.url + "/v1/models").json()["data"]]
    assert ids[1:] == ["x", "y"]
    refused = httpx.post(sim.url + "/_sim/config", json={"itl_ms": 9, "fault": "boom"})
    assert refused.status_code == 400
    assert httpx.get(sim.url + "/_sim/config").json()["itl_ms"] == 5.0


def test_64_concurrent_streams_complete_with_consistent_counts(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "5"})
    results: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        try:
            text = httpx.post(sim.url + CHAT, timeout=60, json=chat_body(
                f"prompt {i}", max_tokens=20, ignore_eos=True, stream=True,
                stream_options={"include_usage": True})).text
            payloads = sse_payloads(text)
            content = [p for p in payloads[:-1]
                       if p["choices"] and p["choices"][0]["delta"].get("content")]
            assert payloads[-2]["usage"]["completion_tokens"] == len(content)
            with lock:
                results.append(len(content))
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert errors == []
    assert results == [20] * 64


def test_sigterm_exits_zero_and_cuts_a_stream_in_flight(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_ITL_MS": "100"})
    received: list[str] = []

    def stream() -> None:
        try:
            with httpx.stream("POST", sim.url + CHAT, timeout=30, json=chat_body(
                    max_tokens=500, ignore_eos=True, stream=True)) as response:
                for line in response.iter_lines():
                    received.append(line)
        except httpx.HTTPError:
            received.append("<cut>")

    reader = threading.Thread(target=stream)
    reader.start()
    deadline = time.monotonic() + 10
    while not any(line.startswith("data: ") for line in received):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    sim.process.send_signal(signal.SIGTERM)
    try:
        assert sim.process.wait(10) == 0
    except subprocess.TimeoutExpired:
        pytest.fail("simulator did not exit after SIGTERM")
    reader.join(10)
    assert "data: [DONE]" not in received
    assert "Draining requests and shutting down" in sim.logs()
    with pytest.raises(httpx.ConnectError):
        httpx.get(sim.url + "/health")
