"""Server figures sampled from the sglang simulator's real /metrics under a little load, and
bench's token-exact prompts from the tokenizer the profile's model mount holds on this host."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from benchprofile import bench_request, sim_profile
from conftest import SimServer
from tinymodel import build_tiny_tokenizer

from opsctl.traffic import app as traffic
from opsctl.traffic.bench.server_sampler import NO_METRICS, ServerFigures, sample_level
from opsctl.traffic.client import make_client

StartSim = Callable[..., SimServer]
SLOW_ENOUGH = {"OPSCTL_SIM_TTFT_MS": "20", "OPSCTL_SIM_ITL_MS": "10"}  # a level of ~0.3 s
REQUESTS, TOKENS = 6, 24


async def load(url: str) -> None:
    """REQUESTS streamed completions of exactly TOKENS tokens, all at once, read to the end."""
    body = {"model": "glm-5", "prompt": "alpha beta", "max_tokens": TOKENS, "stream": True,
            "ignore_eos": True}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        async def one() -> None:
            async with client.stream("POST", "/v1/completions", json=body) as response:
                assert response.status_code == 200
                async for _ in response.aiter_bytes():
                    pass
        await asyncio.gather(*(one() for _ in range(REQUESTS)))


def sampled(url: str) -> ServerFigures:
    async def level() -> ServerFigures:
        await load(url)  # a warm-up: the series exist before the level starts
        async with sample_level(url, None, interval_s=0.05) as sampler:
            await load(url)
        return sampler.result()
    return asyncio.run(level())


def test_the_simulators_metrics_give_the_levels_server_figures(sim_server: StartSim) -> None:
    url = sim_server(env=SLOW_ENOUGH, args=["--served-model-name", "glm-5", "--enable-metrics"]).url
    figures = sampled(url)
    assert figures.unavailable is None and figures.scrape_failures == 0
    # Exactly this level's requests, not the warm-up's: one TTFT and one E2E per request, one
    # ITL per token after the first.
    assert figures.ttft_ms is not None and figures.ttft_ms.count == REQUESTS
    assert figures.e2e_ms is not None and figures.e2e_ms.count == REQUESTS
    assert figures.tpot_ms is not None and figures.tpot_ms.count == REQUESTS  # 0.5.23 names
    assert figures.itl_ms is not None and figures.itl_ms.count == REQUESTS * (TOKENS - 1)
    itl = figures.itl_ms
    assert itl.mean is not None and itl.p50 is not None and itl.p99 is not None
    assert itl.p50 <= itl.p99 and not itl.lower_bounds
    assert figures.running is not None and 1 <= figures.running.max <= REQUESTS
    assert figures.queued is not None and figures.kv_usage is not None
    assert figures.gpu_unavailable is not None or figures.gpus  # a loopback URL: this host's


def test_a_server_with_metrics_disabled_is_unavailable(sim_server: StartSim) -> None:
    url = sim_server(env=SLOW_ENOUGH, args=["--served-model-name", "glm-5"]).url
    figures = sampled(url)
    assert figures.unavailable == NO_METRICS and figures.itl_ms is None


@pytest.mark.parametrize("served_tokenizer", [None, "/models/GLM-5-NVFP4/other"])
def test_random_prompts_use_the_tokenizer_of_the_profiles_model_mount(
    sim_server: StartSim, tmp_path: Path, served_tokenizer: str | None
) -> None:
    pytest.importorskip("tokenizers")  # installed by scripts/setup.sh; CI fails a skip
    weights = build_tiny_tokenizer(tmp_path / "weights")
    args = ["--served-model-name", "glm-5"]
    if served_tokenizer:
        args += ["--tokenizer-path", served_tokenizer]  # the server is not the profile's
    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"}, args=args).url
    request = bench_request(sim_profile(tmp_path, weights), url, out_dir=tmp_path / "out",
                            input_words=7)
    result = traffic.bench(request, launcher=lambda profile: None,  # type: ignore[arg-type,return-value]
                           push=lambda *a: None, plot=lambda report, out: [],
                           client_factory=make_client)
    assert result.error is None, result.error
    config = result.report.config
    assert config.dataset_name == "random"
    assert f"tokenizer {weights / 'tokenizer.json'}" in (config.workload_note or "")
    model = result.report.variants[0].model
    assert model is not None
    mismatch = [note for note in model.notes if "/model_info reports tokenizer" in note]
    assert bool(mismatch) == bool(served_tokenizer)


def test_speculative_steps_count_per_token_and_report_the_accept_length(
    sim_server: StartSim,
) -> None:
    # 2.5 tokens per 30 ms decode step, as the sim profile's bf16kv-mtp variant: TPOT is per token.
    env = {
        "OPSCTL_SIM_TTFT_MS": "20",
        "OPSCTL_SIM_ITL_MS": "30",
        "OPSCTL_SIM_SPEC_ACCEPT_LENGTH": "2.5",
    }
    url = sim_server(env=env, args=["--served-model-name", "glm-5", "--enable-metrics"]).url
    figures = sampled(url)
    accept = figures.spec_accept_length
    assert accept is not None and accept.mean == pytest.approx(2.5)
    # One ITL observation per token after the first, each a step's gap over its tokens (as sglang).
    assert figures.itl_ms is not None and figures.itl_ms.count == REQUESTS * (TOKENS - 1)
    assert figures.tpot_ms is not None and figures.tpot_ms.mean is not None
    assert figures.tpot_ms.mean < 30 * 0.7  # per output token, not per 30 ms step


def test_no_speculation_reports_no_accept_length(sim_server: StartSim) -> None:
    url = sim_server(env=SLOW_ENOUGH, args=["--served-model-name", "glm-5", "--enable-metrics"]).url
    assert sampled(url).spec_accept_length is None
