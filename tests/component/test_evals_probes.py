"""Long-context probes: the needle prompt, and pass/fail against the simulator's eval mode."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import pytest
from conftest import SimServer

from opsctl.core.errors import UsageError
from opsctl.traffic.client import make_client
from opsctl.traffic.evals.probes import (
    ProbeAsk,
    ProbeResult,
    approx_tokens,
    first_integer,
    needle_probe,
    needle_prompt,
    run_long_context_probes,
)

StartSim = Callable[..., SimServer]
FAST = {"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"}
MODEL = "/models/GLM-5-NVFP4"


def run(url: str, probe: Callable[[httpx.AsyncClient], Coroutine[Any, Any, Any]]) -> Any:
    async def go() -> Any:
        async with make_client(url, None) as client:
            return await probe(client)
    return asyncio.run(go())


def by_name(results: list[ProbeResult]) -> dict[str, ProbeResult]:
    return {result.name: result for result in results}


@pytest.mark.parametrize("target", [4096, 16384, 65536])
def test_needle_prompt_size_depth_and_key(target: int) -> None:
    prompt = needle_prompt(target, depth=0.25, seed=3)
    assert target <= prompt.tokens <= target + 16  # overshoot: at most one filler sentence
    assert prompt.tokens == approx_tokens(prompt.text)
    assert prompt.text.count(f"The pass key is {prompt.key}. Remember it.") == 1
    assert prompt.text.endswith("What is the pass key? The pass key is")
    assert abs(prompt.needle_at_tokens - target // 4) <= 64
    assert needle_prompt(target, depth=0.25, seed=3) == prompt  # deterministic by seed
    assert needle_prompt(target, depth=0.25, seed=4).key != prompt.key


def test_needle_prompt_with_a_tokenizer_count() -> None:
    def chars(text: str) -> int:  # a stand-in tokenizer: 4 characters per token
        return len(text) // 4
    prompt = needle_prompt(2048, depth=1.0, seed=0, count_tokens=chars)
    assert 2048 <= chars(prompt.text) <= 2048 + 16
    assert prompt.text.index(prompt.key) > len(prompt.text) - 200  # depth 1: at the end


def test_needle_prompt_rejects_bad_depth_and_tiny_size() -> None:
    with pytest.raises(UsageError):
        needle_prompt(4096, depth=1.5, seed=0)
    with pytest.raises(UsageError):
        needle_prompt(10, depth=0.5, seed=0)


def test_first_integer() -> None:
    assert first_integer(" 48213. Remember it. 48213") == "48213"
    assert first_integer("no digits") is None


def test_all_probes_pass_on_a_healthy_server(sim_server: StartSim) -> None:
    url = sim_server(env=FAST).url
    results = by_name(run(url, lambda c: run_long_context_probes(c, ProbeAsk(model=MODEL), seed=5)))
    assert list(results) == ["needle-4k", "needle-16k", "needle-64k", "prefix-pair-16k"]
    assert all(result.passed and result.error is None for result in results.values()), results
    needle = results["needle-64k"]
    assert needle.got == needle.expected
    # The simulator counts prompt tokens with the same word/punctuation rule.
    assert needle.prompt_tokens == needle.prompt_tokens_approx
    assert results["prefix-pair-16k"].expected == results["prefix-pair-16k"].got
    assert "found" in results["prefix-pair-16k"].detail


def test_needles_beyond_the_broken_range_fail(sim_server: StartSim) -> None:
    url = sim_server(env={**FAST, "OPSCTL_SIM_NEEDLE_MAX_TOKENS": "6000"}).url
    results = by_name(run(url, lambda c: run_long_context_probes(c, ProbeAsk(model=MODEL), seed=5)))
    assert results["needle-4k"].passed  # needle at about token 2000
    for name in ("needle-16k", "needle-64k"):
        result = results[name]
        assert not result.passed and result.error is None
        assert result.got is not None and result.got != result.expected
        assert len(result.got) == len(result.expected or "")  # fluent: digits, just wrong ones
    pair = results["prefix-pair-16k"]
    assert pair.passed and "missed" in pair.detail  # consistent, even though wrong


def test_needle_near_the_start_is_found_even_in_a_long_prompt(sim_server: StartSim) -> None:
    url = sim_server(env={**FAST, "OPSCTL_SIM_NEEDLE_MAX_TOKENS": "6000"}).url
    result = run(url, lambda c: needle_probe(c, ProbeAsk(model=MODEL), target_tokens=16384,
                                                depth=0.0))
    assert result.passed, result.detail


def test_failed_request_fails_the_probe_with_its_error(sim_server: StartSim) -> None:
    env = {**FAST, "OPSCTL_SIM_FAULT": "error_rate", "OPSCTL_SIM_ERROR_RATE": "1"}
    url = sim_server(env=env).url
    result = run(url, lambda c: needle_probe(c, ProbeAsk(model=MODEL), target_tokens=4096))
    assert not result.passed and result.got is None
    assert result.error is not None and "HTTP 500" in result.error

