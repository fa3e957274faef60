"""Server-side figures: the /metrics parser, histogram deltas and bucket estimates, gauges over
several label sets, the sampler's failure modes, GPU readings, and the report's rendering."""

from __future__ import annotations

import asyncio
import gzip
import math
from collections.abc import Iterator

import httpx
import pytest

from opsctl.core.httpcap import MAX_BODY_BYTES, CappedAsyncTransport
from opsctl.traffic.bench.gpu_sample import GpuProbe, GpuTally, on_this_host, parse_query
from opsctl.traffic.bench.server_sampler import (
    ESTIMATE_NOTE,
    NO_METRICS,
    LevelSampler,
    ScrapeFailed,
    ServerFigures,
    combine_requests,
    combine_usage,
    fetch_metrics,
    latency,
    sample_level,
)
from opsctl.traffic.promtext import (
    Histogram,
    HistogramError,
    bucket_quantile,
    delta,
    histograms,
    parse_selected,
)

ITL = "sglang:inter_token_latency_seconds"


def itl_page(counts: tuple[float, float, float], total: float, *, running: float = 3,
             labels: str = 'model_name="glm-5"', prefix: str = "sglang:") -> str:
    """A /metrics page with one ITL histogram (edges 10 ms, 20 ms, +Inf) and the gauges."""
    name = f"{prefix}inter_token_latency_seconds"
    cumulative = [sum(counts[:i + 1]) for i in range(3)]
    lines = ["# HELP x y", f"# TYPE {name} histogram"]
    for edge, value in zip(("0.01", "0.02", "+Inf"), cumulative, strict=True):
        lines.append(f'{name}_bucket{{{labels},le="{edge}"}} {value}')
    lines += [f"{name}_sum{{{labels}}} {total}", f"{name}_count{{{labels}}} {cumulative[-1]}",
              f'{prefix}num_running_reqs{{model_name="glm-5",tp_rank="0"}} {running}',
              f'{prefix}num_queue_reqs{{model_name="glm-5",tp_rank="0"}} 1',
              f'{prefix}token_usage{{model_name="glm-5",tp_rank="0"}} 0.25']
    return "\n".join(lines) + "\n"


# --- the parser -----------------------------------------------------------------------------

def test_parser_reads_labels_with_escapes_and_skips_garbage() -> None:
    text = "\n".join([
        'sglang:num_running_reqs{model_name="a,b}\\"c\\\\",tp_rank="0"} 4 1700000000000',
        "sglang:num_running_reqs{broken 5",
        "sglang:num_running_reqs{x=\"1\"} not-a-number",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs NaN",
        "other_metric 7",
        "",
    ])
    parsed = parse_selected(text, ["sglang:num_running_reqs", "sglang:num_queue_reqs"])
    assert parsed["sglang:num_running_reqs"] == {
        (("model_name", 'a,b}"c\\'), ("tp_rank", "0")): 4.0}
    assert math.isnan(parsed["sglang:num_queue_reqs"][()])
    assert "other_metric" not in parsed


def test_histograms_need_buckets_sum_count_and_inf() -> None:
    parsed = parse_selected(itl_page((1, 2, 0), 0.04),
                            [f"{ITL}_bucket", f"{ITL}_sum", f"{ITL}_count"])
    (labels, hist), = histograms(parsed, ITL).items()
    assert labels == (("model_name", "glm-5"),)
    assert hist.buckets == ((0.01, 1.0), (0.02, 3.0), (math.inf, 3.0)) and hist.count == 3
    del parsed[f"{ITL}_sum"]
    assert histograms(parsed, ITL) == {}


# --- deltas and estimates -------------------------------------------------------------------

def h(*cumulative: float, total: float = 1.0) -> Histogram:
    edges = (0.01, 0.02, math.inf)
    return Histogram(tuple(zip(edges, cumulative, strict=True)), total, cumulative[-1])


def test_delta_is_end_minus_start_summed_over_label_sets() -> None:
    a, b = (("stream", "true"),), (("stream", "false"),)
    level = delta(
        {a: h(1, 2, 2, total=0.03)}, {a: h(3, 6, 6, total=0.09), b: h(0, 1, 1, total=0.015)}
    )
    assert level.buckets == ((0.01, 2.0), (0.02, 5.0), (math.inf, 5.0))
    assert level.count == 5 and level.sum == pytest.approx(0.075)


@pytest.mark.parametrize(("start", "end", "why"), [
    ({(): h(5, 5, 5)}, {(): h(1, 1, 1)}, "reset"),  # the server restarted: counts went down
    ({(): h(1, 1, 1, total=2.0)}, {(): h(1, 1, 1, total=0.5)}, "reset"),  # so did the sum
    ({(("a", "1"),): h(1, 1, 1)}, {(("a", "2"),): h(2, 2, 2)}, "reset"),  # a series vanished
    ({}, {(): h(1, math.nan, 2)}, "NaN"),
    ({}, {}, "no series"),
    # finite values whose difference overflows: the level's count would be infinite
    ({(): h(-1e308, -1e308, -1e308)}, {(): h(1e308, 1e308, 1e308)}, "infinite"),
    ({}, {(("a", "1"),): h(1e308, 1e308, 1e308), (("a", "2"),): h(1e308, 1e308, 1e308)},
     "infinite"),
    ({}, {(("a", "1"),): h(1, 1, 1), (("a", "2"),): Histogram(((1.0, 1), (math.inf, 1)), 1, 1)},
     "different buckets"),
])
def test_delta_refuses_what_it_cannot_subtract(start: dict, end: dict, why: str) -> None:
    with pytest.raises(HistogramError, match=why):
        delta(start, end)


def test_bucket_quantile_interpolates_and_flags_the_inf_bucket() -> None:
    # 10 observations: 4 in (0, 10 ms], 4 in (10, 20 ms], 2 above 20 ms.
    hist = h(4, 8, 10)
    assert bucket_quantile(0.2, hist) == (pytest.approx(0.005), False)
    assert bucket_quantile(0.5, hist) == (pytest.approx(0.0125), False)
    assert bucket_quantile(0.99, hist) == (0.02, True)
    assert bucket_quantile(0.5, h(0, 0, 0)) == (None, False)
    # Non-monotone buckets (a torn scrape) are read as Prometheus reads them.
    assert bucket_quantile(0.5, Histogram(((0.01, 4), (0.02, 3), (math.inf, 8)), 0, 8))[0] \
        == pytest.approx(0.01)


def test_latency_is_in_ms_with_exact_mean_and_says_why_when_missing() -> None:
    figure = latency({(): h(0, 0, 0, total=0)}, {(): h(4, 8, 10, total=0.2)})
    assert (figure.count, figure.mean, figure.p50) == (10, 20.0, 12.5)
    assert figure.lower_bounds == ["p90", "p99"] and figure.p99 == 20.0  # ranks 9, 9.9 of 10
    assert latency({(): h(1, 1, 1)}, {(): h(1, 1, 1)}).unavailable == \
        "no observation during the level"
    assert (latency({(): h(9, 9, 9)}, {(): h(1, 1, 1)}).unavailable or "").startswith("reset")


def test_gauges_sum_dp_groups_and_take_the_fullest_pool() -> None:
    def labels(dp: str, tp: str) -> tuple[tuple[str, str], ...]:
        return (("dp_rank", dp), ("model_name", "m"), ("tp_rank", tp))
    running = {labels("0", "0"): 3, labels("0", "1"): 3, labels("1", "0"): 5,
               labels("1", "1"): math.nan}
    assert combine_requests(running) == 8
    assert combine_usage({labels("0", "0"): 0.2, labels("1", "0"): 0.7}) == 0.7
    assert combine_requests({}) is None and combine_usage({(): math.inf}) is None


# --- the sampler ----------------------------------------------------------------------------

def pages(*bodies: str | Exception) -> Iterator[str | Exception]:
    yield from bodies
    while True:
        yield bodies[-1]


def fetcher(bodies: Iterator[str | Exception]):  # type: ignore[no-untyped-def]
    async def fetch() -> str:
        body = next(bodies)
        if isinstance(body, Exception):
            raise body
        return body
    return fetch


def run_level(sampler: LevelSampler, scrapes: int = 1, *, final: bool = True) -> ServerFigures:
    """Start, wait until `scrapes` scrapes were made (the start one included), stop."""
    async def level() -> None:
        await sampler.start()
        async with asyncio.timeout(10):
            while sampler.result().scrapes < scrapes:
                await asyncio.sleep(0.001)
        await sampler.stop(final=final)
    asyncio.run(level())
    return sampler.result()


def test_a_level_gets_gauges_and_histogram_deltas() -> None:
    bodies = pages(itl_page((1, 0, 0), 0.005, running=0), itl_page((1, 0, 0), 0.005, running=4),
                   itl_page((5, 4, 1), 0.2, running=0))
    figures = run_level(LevelSampler(fetcher(bodies), interval_s=0.001), 2)
    assert figures.unavailable is None and figures.scrape_failures == 0
    assert figures.running is not None and figures.running.max == 4 and figures.running.samples >= 1
    assert (
        figures.queued is not None and figures.kv_usage is not None and figures.kv_usage.max == 0.25
    )
    assert figures.itl_ms is not None and figures.itl_ms.count == 9
    assert figures.itl_ms.mean == pytest.approx(195 / 9, abs=1e-3)
    assert figures.ttft_ms is not None and figures.ttft_ms.unavailable == "not exported"
    assert figures.e2e_ms is None and figures.tpot_ms is None  # optional families stay quiet
    assert ESTIMATE_NOTE in figures.notes


def cache_page(prompt: float, cached: dict[str, float] | None, *, named: bool = True) -> str:
    """itl_page plus the prompt and cached token counters (`cached` by cache_source)."""
    lines = [f'sglang:prompt_tokens_total{{model_name="glm-5",is_streaming="true"}} {prompt}']
    if named:
        lines.append("# TYPE sglang:cached_tokens_total counter")
    lines += [f'sglang:cached_tokens_total{{model_name="glm-5",cache_source="{source}"}} {value}'
              for source, value in (cached or {}).items()]
    return itl_page((1, 0, 0), 0.005) + "\n".join(lines) + "\n"


def test_the_prefix_cache_over_a_level_is_the_counters_end_minus_start() -> None:
    bodies = pages(cache_page(1000, {"device": 100}),
                   cache_page(5000, {"device": 2100, "host": 300}))
    cache = run_level(LevelSampler(fetcher(bodies), interval_s=60)).cache
    assert cache is not None
    assert (cache.prompt_tokens, cache.cached_tokens) == (4000, 2300)
    assert cache.by_source == {"device": 2000, "host": 300} and cache.hit_rate_pct == 57.5
    # named but never incremented (sglang and the simulator before a first cache hit): 0 cached
    none_cached = run_level(LevelSampler(fetcher(pages(cache_page(10, None), cache_page(30, None))),
                                         interval_s=60)).cache
    assert none_cached is not None and none_cached.cached_tokens == 0
    assert none_cached.hit_rate_pct == 0.0


@pytest.mark.parametrize(("start", "end"), [
    (cache_page(10, None, named=False), cache_page(30, None, named=False)),  # no such counter
    (cache_page(5000, {"device": 10}), cache_page(40, {"device": 1})),  # restarted: went down
    (itl_page((1, 0, 0), 0.005), cache_page(30, None)),  # no prompt counter at the start
])
def test_no_cache_figure_where_the_counters_cannot_say(start: str, end: str) -> None:
    assert run_level(LevelSampler(fetcher(pages(start, end)), interval_s=60)).cache is None


def test_the_router_spelling_is_read_too() -> None:
    bodies = pages(
        itl_page((0, 0, 0), 0, prefix="sglang_"), itl_page((2, 0, 0), 0.01, prefix="sglang_")
    )
    figures = run_level(LevelSampler(fetcher(bodies), interval_s=60))
    assert figures.itl_ms is not None and figures.itl_ms.count == 2
    assert figures.running is None and any("no gauge sample" in n for n in figures.notes)


def test_a_restart_during_the_level_says_reset() -> None:
    bodies = pages(itl_page((50, 0, 0), 0.3), itl_page((2, 0, 0), 0.01))
    figures = run_level(LevelSampler(fetcher(bodies), interval_s=60))
    assert figures.itl_ms is not None and (figures.itl_ms.unavailable or "").startswith("reset")


@pytest.mark.parametrize(("first", "why"), [
    (ScrapeFailed(NO_METRICS), NO_METRICS),
    ("# vLLM\nvllm:num_requests_running 1\n", "none of sglang's series"),
])
def test_a_server_without_sglang_metrics_is_unavailable_not_an_error(
    first: object, why: str
) -> None:
    figures = run_level(LevelSampler(fetcher(pages(first)), interval_s=0.01))  # type: ignore[arg-type]
    assert why in (figures.unavailable or "")
    assert figures.itl_ms is None and figures.scrapes == 1  # no polling after that


def test_failed_scrapes_are_counted_and_a_missing_end_sample_is_said() -> None:
    bodies = pages(itl_page((1, 0, 0), 0.005), ScrapeFailed("GET /metrics: HTTP 500"))
    figures = run_level(LevelSampler(fetcher(bodies), interval_s=0.001), 3)
    assert figures.scrape_failures >= 2 and figures.last_failure == "GET /metrics: HTTP 500"
    assert figures.itl_ms is not None and "no end sample" in (figures.itl_ms.unavailable or "")


def test_a_level_cut_short_keeps_gauges_and_takes_no_end_sample() -> None:
    sampler = LevelSampler(fetcher(pages(itl_page((1, 0, 0), 0.005))), interval_s=0.001)
    figures = run_level(sampler, 2, final=False)
    assert figures.running is not None
    assert figures.itl_ms is not None and "cut short" in (figures.itl_ms.unavailable or "")


def test_scrapes_per_level_are_bounded() -> None:
    sampler = LevelSampler(fetcher(pages(itl_page((1, 0, 0), 0.005))), interval_s=0.001,
                           max_scrapes=3)
    async def level() -> None:
        await sampler.start()
        async with asyncio.timeout(10):
            while not sampler.result().notes:  # the poll says when it stops
                await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)  # no further scrape comes
        await sampler.stop()
    asyncio.run(level())
    figures = sampler.result()
    assert figures.scrapes == 4  # start, two periodic, end
    assert any("periodic samples stopped" in note for note in figures.notes)


# --- HTTP -----------------------------------------------------------------------------------

def mock_client(handler) -> httpx.AsyncClient:  # type: ignore[no-untyped-def]
    return httpx.AsyncClient(base_url="http://sim", transport=CappedAsyncTransport(
        httpx.MockTransport(handler)))


@pytest.mark.parametrize(("response", "why"), [
    (httpx.Response(404), "sglang serves it only with --enable-metrics"),
    (httpx.Response(503, text="loading"), "HTTP 503"),
    (httpx.Response(200, content=b"x" * (MAX_BODY_BYTES + 1)), "exceeds the 8 MiB cap"),
    # httpx would decode it whole, past the cap: 8 MiB of gzip are gigabytes
    (httpx.Response(200, content=gzip.compress(b"sglang:num_running_reqs 1\n"),
                    headers={"Content-Encoding": "gzip"}), "'gzip'-encoded"),
])
def test_fetch_metrics_turns_every_failure_into_one_line(
    response: httpx.Response, why: str
) -> None:
    async def go() -> str:
        async with mock_client(lambda request: response) as client:
            return await fetch_metrics(client)
    with pytest.raises(ScrapeFailed, match=why):
        asyncio.run(go())


def test_sample_level_through_http_with_gpu_readings() -> None:
    bodies = pages(
        itl_page((0, 0, 0), 0), itl_page((0, 0, 0), 0, running=2), itl_page((3, 0, 0), 0.015)
    )
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200, text=str(next(bodies)))

    calls: list[list[str]] = []

    def smi(argv: list[str]) -> tuple[int, str]:
        calls.append(argv)
        return 0, "2, 50, 1000, 97887\n3, [N/A], 3000, 97887\n"

    probe = GpuProbe(run=smi, which=lambda name: "/usr/bin/nvidia-smi", indices=[2, 3])

    async def go() -> ServerFigures:
        async with sample_level("http://sim", None, interval_s=0.01, gpu=probe,
                                client_factory=lambda url, key: mock_client(handler)) as sampler:
            async with asyncio.timeout(10):
                while len(calls) < 2:  # the first reading is in once the second is asked for
                    await asyncio.sleep(0.001)
        return sampler.result()

    figures = asyncio.run(go())
    assert set(seen) == {"/metrics"} and figures.itl_ms is not None and figures.itl_ms.count == 3
    assert "--id=2,3" in calls[0]
    assert [g.index for g in figures.gpus] == [2, 3] and figures.gpu_unavailable is None
    assert figures.gpus[0].util_mean_pct == 50 and figures.gpus[1].util_mean_pct is None
    assert figures.gpus[1].mem_used_max_mib == 3000 and figures.gpus[1].mem_total_mib == 97887


def test_gpu_figures_say_why_they_are_missing() -> None:
    assert GpuProbe(which=lambda name: None).unavailable() == "no nvidia-smi"
    failing = GpuProbe(run=lambda argv: (9, "NVIDIA-SMI has failed\n"), which=lambda n: "/x")

    async def go(url: str, gpu: object) -> ServerFigures:
        async with sample_level(url, None, gpu=gpu,  # type: ignore[arg-type]
                                client_factory=lambda u, k: mock_client(
                                    lambda r: httpx.Response(404))) as sampler:
            async with asyncio.timeout(10):
                while sampler.result().gpu_unavailable is None:
                    await asyncio.sleep(0.001)
        return sampler.result()

    assert asyncio.run(go("http://10.1.2.3:30000", "auto")).gpu_unavailable == \
        "the server is not on this host (its GPUs cannot be read from here)"
    assert asyncio.run(go("http://127.0.0.1:1", None)).gpu_unavailable == "not sampled"
    broken = asyncio.run(go("http://127.0.0.1:1", failing))
    assert broken.gpu_unavailable == "nvidia-smi failed (exit 9): NVIDIA-SMI has failed"
    assert broken.unavailable == NO_METRICS  # the server side fails on its own


def test_nvidia_smi_output_is_read_defensively() -> None:
    rows = parse_query("0, 87, 91234, 97887, NVIDIA RTX PRO 6000, Blackwell\nGPU lost\n"
                       "1, [Not Supported], nan, 97887, [N/A]\n2, 1, 2, 3\n")
    assert rows == [(0, 87.0, 91234.0, 97887.0, "NVIDIA RTX PRO 6000, Blackwell"),
                    (1, None, None, 97887.0, None), (2, 1.0, 2.0, 3.0, None)]
    tally = GpuTally()
    tally.add(rows)
    tally.add([(0, 13.0, 90000.0, 97887.0, None)])
    first = tally.figures()[0]
    assert (first.samples, first.util_mean_pct, first.util_max_pct, first.mem_used_max_mib) == \
        (2, 50.0, 87.0, 91234.0)
    assert first.name == "NVIDIA RTX PRO 6000, Blackwell" and tally.figures()[1].name is None


@pytest.mark.parametrize(("url", "local"), [
    ("http://127.0.0.1:30000", True), ("http://localhost:1", True), ("http://[::1]:2", True),
    ("http://10.0.0.5:30000", False), ("http://gpu-box:30000", False), ("not a url", False),
])
def test_on_this_host(url: str, local: bool) -> None:
    assert on_this_host(url) is local


@pytest.mark.parametrize("value", ["1e308", "1.7e308"])
def test_gauge_values_near_the_float_limit_never_make_an_infinite_mean(value: str) -> None:
    """Each sample is finite, their sum was not: spec_accept_length 1e308 twice made the mean
    inf (adversarial pass), which bench_serving.jsonl wrote as the non-JSON `Infinity`."""
    page = (f"sglang:num_running_reqs 1\nsglang:spec_accept_length {value}\n"
            f"sglang:token_usage {value}\n")

    async def fetch() -> str:
        return page

    async def run() -> ServerFigures:
        sampler = LevelSampler(fetch, interval_s=0.01)
        await sampler.start()
        while sampler._figures.scrapes < 4:  # the start sample and at least 3 polled ones
            await asyncio.sleep(0.01)
        await sampler.stop()
        return sampler.result()

    figures = asyncio.run(run())
    for figure in (figures.spec_accept_length, figures.kv_usage):
        assert figure is not None and figure.samples >= 2
        assert math.isfinite(figure.mean) and figure.mean == pytest.approx(float(value))
