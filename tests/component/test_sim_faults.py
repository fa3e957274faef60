"""Each simulated fault, over real HTTP on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

# The sim_server fixture (tests/conftest.py) returns a SimServer: .url, .process, .logs().
StartSim = Callable[..., Any]
CHAT = "/v1/chat/completions"
FAST = {"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"}


def chat_body(content: str = "Say something.", **extra: Any) -> dict[str, Any]:
    return {"model": "glm-5", "messages": [{"role": "user", "content": content}],
            "temperature": 0, **extra}


def test_die_while_loading_exits_nonzero_with_an_oom_line(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_FAULT": "die_while_loading",
                          "OPSCTL_SIM_LOAD_SECONDS": "0.4"}, wait="none")
    assert sim.process.wait(15) != 0
    logs = sim.logs()
    assert "Scheduler hit an exception" in logs
    assert "CUDA out of memory" in logs
    assert "Received sigquit from a child process" in logs


def test_hang_never_answers_and_health_fails_after_the_probe_budget(sim_server: StartSim
                                                                    ) -> None:
    sim = sim_server(env={"SGLANG_HEALTH_CHECK_TIMEOUT": "0.5"})
    httpx.post(sim.url + "/_sim/config", json={"fault": "hang"}).raise_for_status()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(sim.url + CHAT, json=chat_body(max_tokens=2), timeout=1.0)
    assert httpx.get(sim.url + "/ready").status_code == 200  # not known to be stuck yet
    assert httpx.get(sim.url + "/health_generate", timeout=10).status_code == 503
    assert httpx.get(sim.url + "/ready").status_code == 503  # the failed probe marked it
    assert httpx.get(sim.url + "/v1/models").status_code == 200
    httpx.post(sim.url + "/_sim/config", json={"fault": "none"}).raise_for_status()
    assert httpx.get(sim.url + "/health").status_code == 200
    assert httpx.get(sim.url + "/ready").status_code == 200


def test_stream_cut_drops_the_connection_after_n_tokens(sim_server: StartSim) -> None:
    sim = sim_server(env={**FAST, "OPSCTL_SIM_FAULT": "stream_cut",
                          "OPSCTL_SIM_STREAM_CUT_AFTER": "4"})
    lines: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError), httpx.stream(
            "POST", sim.url + CHAT, json=chat_body(max_tokens=20, stream=True,
                                                   stream_options={"include_usage": True})
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            lines.append(line)
    payloads = [json.loads(line[6:]) for line in lines
                if line.startswith("data: ") and line != "data: [DONE]"]
    content = [p for p in payloads if p["choices"] and p["choices"][0]["delta"].get("content")]
    assert len(content) == 4
    assert "data: [DONE]" not in lines
    assert all(p["choices"] and p["choices"][0]["finish_reason"] is None for p in payloads)
    # Non-streaming requests are not cut.
    plain = httpx.post(sim.url + CHAT, json=chat_body(max_tokens=6))
    assert plain.json()["usage"]["completion_tokens"] == 6


def test_slow_first_token_multiplies_ttft(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_TTFT_MS": "20", "OPSCTL_SIM_FAULT": "slow_first_token"})
    started = time.monotonic()
    with httpx.stream("POST", sim.url + CHAT,
                      json=chat_body(max_tokens=2, stream=True)) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break
    # 20 ms x 20 = 400 ms is a floor the simulator cannot beat.
    assert time.monotonic() - started >= 0.4


def test_error_rate_fails_exactly_that_fraction(sim_server: StartSim) -> None:
    sim = sim_server(env={**FAST, "OPSCTL_SIM_FAULT": "error_rate",
                          "OPSCTL_SIM_ERROR_RATE": "0.5"})
    statuses = [httpx.post(sim.url + CHAT, json=chat_body(max_tokens=1)).status_code
                for _ in range(10)]
    assert sorted(statuses) == [200] * 5 + [500] * 5
    failed = httpx.post(sim.url + "/_sim/config", json={"error_rate": 1.0})
    failed.raise_for_status()
    error = httpx.post(sim.url + "/v1/completions", json={"prompt": "x"})
    assert error.status_code == 500
    assert error.json()["type"] == "InternalServerError"
    assert httpx.get(sim.url + "/health").status_code == 200


def test_corrupt_changes_greedy_output_deterministically(sim_server: StartSim) -> None:
    sim = sim_server(env=FAST)

    def text() -> str:
        body = httpx.post(sim.url + CHAT, json=chat_body("fixed prompt", max_tokens=16)).json()
        return str(body["choices"][0]["message"]["content"])

    clean = text()
    httpx.post(sim.url + "/_sim/config", json={"fault": "corrupt"}).raise_for_status()
    corrupted = text()
    assert corrupted != clean
    assert text() == corrupted
    httpx.post(sim.url + "/_sim/config", json={"fault": "none"}).raise_for_status()
    assert text() == clean


def test_a_bad_behaviour_variable_exits_2(sim_server: StartSim) -> None:
    sim = sim_server(env={"OPSCTL_SIM_FAULT": "explode"}, wait="none")
    assert sim.process.wait(15) == 2
    assert "fault must be one of" in sim.logs()
