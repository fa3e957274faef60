"""Server-side figures per bench level: the server's own /metrics, and its GPUs, while it runs.

`async with sample_level(base_url, api_key) as sampler:` around a level's measured phase
scrapes /metrics once at the start, every `interval_s` during the level and once at the end;
`sampler.result()` is then a `ServerFigures`: running and queued requests and KV usage from the
periodic samples (mean, max), and the server's own ITL, TTFT, TPOT and E2E histograms as the
difference end minus start (mean = sum/count; p50/p90/p99 estimated from the buckets), so the
client's view and the server's sit side by side. The sampler uses its own connection, so a
level that holds every connection of the load's pool does not delay it.

sglang's names and labels (0.5.23; the simulator speaks the same):
  - gauges `sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:token_usage`
    (srt/observability/metrics_collector.py:365,371,405), labelled model_name, engine_type,
    tp_rank, pp_rank, moe_ep_rank [, dp_rank] (metrics_collector.py:1382-1392),
    written by the attention-TP rank 0 of each DP group unless
    --enable-metrics-for-all-schedulers;
  - histograms `sglang:time_to_first_token_seconds`, `sglang:inter_token_latency_seconds`,
    `sglang:e2e_request_latency_seconds` (metrics_collector.py:2041,2051,2068) and
    `sglang:request_time_per_output_token_seconds` (:2058), labelled model_name [+ custom labels] [+
    is_streaming in 0.5.23]. The ITL histogram counts one observation per token (a chunk of k tokens
    adds k observations of interval/k: metrics_collector.py:2161-2183).
The router's spelling `sglang_` is read too. Several label sets: histogram counts are summed;
`running`/`queued` are summed over DP groups and maxed over the tp/pp/ep ranks of one group
(they report the same batch); KV usage takes the fullest pool.

A server without /metrics (`transformers serve`, sglang without --enable-metrics: 404) or
whose /metrics carries none of sglang's series gets `unavailable` with the reason; a failed
scrape is counted, never fatal. Scrapes per level are bounded in count and bytes.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Literal

import httpx
from pydantic import BaseModel

from opsctl.core.httpcap import IDENTITY, capped_async_transport
from opsctl.core.redact import auth_headers
from opsctl.traffic.bench.gpu_sample import (
    GpuFigure,
    GpuProbe,
    GpuQueryFailed,
    GpuTally,
    on_this_host,
)
from opsctl.traffic.promtext import (
    Histogram,
    HistogramError,
    Labels,
    Parsed,
    bucket_quantile,
    delta,
    histograms,
    parse_selected,
)

PREFIXES = ("sglang:", "sglang_")
# spec_accept_length: accepted draft tokens + the bonus token per verify step (speculative
# decoding; 0.5.23 observability/metrics_collector.py:511-516).
GAUGES = ("num_running_reqs", "num_queue_reqs", "token_usage", "spec_accept_length")
# (ServerFigures field, histogram base name, whether a page without it deserves a note)
HISTOGRAMS = (
    ("itl_ms", "inter_token_latency_seconds", True),
    ("ttft_ms", "time_to_first_token_seconds", True),
    ("tpot_ms", "request_time_per_output_token_seconds", False),  # 0.5.23 only
    ("e2e_ms", "e2e_request_latency_seconds", False),
)
# Counters read at the start and end samples only (end minus start is the level's share):
# prompt tokens of each finished request, and those of them served from the prefix cache by
# `cache_source` (device/host/storage, or `total` without details): 0.5.23
# observability/metrics_collector.py:1855-1858,1934-1938, incremented per finished request at
# :2109-2134. A page that names the cached counter without a sample has cached nothing yet.
PROMPT_TOKENS = "prompt_tokens_total"
CACHED_TOKENS = "cached_tokens_total"
RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "attn_cp_rank"})
# Every 2 s: each scrape costs the client about a millisecond of CPU (fetch + parse of the
# sim's 35 KB page), which at 1 s was a measurable share of a light level's client CPU.
DEFAULT_INTERVAL_S = 2.0
SCRAPE_TIMEOUT_S = 5.0
MAX_SCRAPES = 1800  # per level: an hour at the default interval (a sweep's deadline cap)
MAX_SCRAPE_BYTES = 256 << 20  # per level, in total
ESTIMATE_NOTE = "server percentiles are estimates, interpolated within the histogram buckets"
COMBINE_NOTE = ("several label sets: histograms summed; running/queued summed over DP groups "
                "(max over the tp/pp/ep ranks of one); KV usage the fullest pool")
NO_METRICS = "the server has no /metrics (sglang serves it only with --enable-metrics)"

_GAUGE_NAMES = tuple(p + g for p in PREFIXES for g in GAUGES)
_COUNTER_NAMES = tuple(p + c for p in PREFIXES for c in (PROMPT_TOKENS, CACHED_TOKENS))
_HISTOGRAM_NAMES = tuple(p + base + part for p in PREFIXES for _, base, _ in HISTOGRAMS
                         for part in ("_bucket", "_sum", "_count"))


class GaugeFigure(BaseModel):
    """A gauge over the periodic samples of a level (not the start/end ones, taken idle)."""

    mean: float
    max: float
    samples: int


class LatencyFigure(BaseModel):
    """One server histogram over the level (end minus start), in milliseconds."""

    count: int = 0
    mean: float | None = None  # sum / count: exact
    p50: float | None = None  # bucket estimates
    p90: float | None = None
    p99: float | None = None
    lower_bounds: list[str] = []  # percentiles in the +Inf bucket: the top finite edge, at least
    unavailable: str | None = None


class CacheFigure(BaseModel):
    """The prefix cache over one level, from the server's own counters (end minus start)."""

    prompt_tokens: int  # prompt tokens of the requests that finished during the level
    cached_tokens: int  # of them, served from the prefix cache
    by_source: dict[str, int] = {}  # cache_source label -> tokens (device, host, storage)

    @property
    def hit_rate_pct(self) -> float | None:
        return None if self.prompt_tokens <= 0 else round(
            self.cached_tokens / self.prompt_tokens * 100, 2)


class ServerFigures(BaseModel):
    """What the server itself reported during one level, and the host's GPUs."""

    unavailable: str | None = None  # no server figure at all, and why
    interval_s: float
    window_s: float | None = None  # between the start and end samples
    scrapes: int = 0
    scrape_failures: int = 0
    last_failure: str | None = None
    running: GaugeFigure | None = None
    queued: GaugeFigure | None = None
    kv_usage: GaugeFigure | None = None  # share of the KV pool in use, 0..1
    # Mean tokens per verify step of speculative decoding (MTP); None when the server exports no
    # positive value (sglang exports 0 without speculation). Tokens per second divided by it is
    # the step rate: TPOT is per output token, so a step that yields 3 tokens counts as 3.
    spec_accept_length: GaugeFigure | None = None
    itl_ms: LatencyFigure | None = None
    ttft_ms: LatencyFigure | None = None
    tpot_ms: LatencyFigure | None = None  # None: not exported (0.5.15)
    e2e_ms: LatencyFigure | None = None
    # None: the server exports no prompt-token counter, or the level had no end sample.
    cache: CacheFigure | None = None
    notes: list[str] = []
    gpus: list[GpuFigure] = []
    gpu_unavailable: str | None = None


MetricsClient = Callable[[str, str | None], httpx.AsyncClient]  # (base URL, API key) -> client


def metrics_client(base_url: str, api_key: str | None) -> httpx.AsyncClient:
    """One capped connection of its own, proxies from the environment ignored (as the load's)."""
    transport = capped_async_transport()
    return httpx.AsyncClient(base_url=base_url.rstrip("/"),
                             headers={**IDENTITY, **auth_headers(api_key)},
                             timeout=httpx.Timeout(SCRAPE_TIMEOUT_S), transport=transport,
                             trust_env=False)


class ScrapeFailed(Exception):
    """One /metrics read failed; the message is one line."""


async def fetch_metrics(client: httpx.AsyncClient, timeout_s: float = SCRAPE_TIMEOUT_S) -> str:
    """GET /metrics in Prometheus' text format, within `timeout_s` and the client's byte cap."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/metrics", headers={"Accept": "text/plain"})
    except TimeoutError:
        raise ScrapeFailed(f"GET /metrics did not answer within {timeout_s:g}s") from None
    except httpx.HTTPError as exc:  # refused, cut, over the byte cap
        raise ScrapeFailed(f"GET /metrics: {type(exc).__name__}: {exc}"[:300]) from None
    if response.status_code == 404:
        raise ScrapeFailed(NO_METRICS)
    if response.status_code != 200:
        raise ScrapeFailed(f"GET /metrics: HTTP {response.status_code}")
    return response.content.decode("utf-8", errors="replace")


def combine_requests(values: Mapping[Labels, float]) -> float | None:
    """Summed over DP groups (label sets apart from the rank labels), max within one group."""
    groups: dict[Labels, float] = {}
    for labels, value in values.items():
        if math.isfinite(value):
            key = tuple(pair for pair in labels if pair[0] not in RANK_LABELS)
            groups[key] = max(groups.get(key, value), value)
    return sum(groups.values()) if groups else None


def combine_mean(values: Mapping[Labels, float]) -> float | None:
    finite = [value for value in values.values() if math.isfinite(value)]
    return sum(finite) / len(finite) if finite else None


def combine_usage(values: Mapping[Labels, float]) -> float | None:
    finite = [value for value in values.values() if math.isfinite(value)]
    return max(finite) if finite else None


def _series(parsed: Parsed, name: str) -> dict[Labels, float]:
    return parsed.get(PREFIXES[0] + name) or parsed.get(PREFIXES[1] + name) or {}


def _histograms(parsed: Parsed) -> dict[str, dict[Labels, Histogram]]:
    found = {}
    for _, base, _ in HISTOGRAMS:
        prefix = next((p for p in PREFIXES if f"{p}{base}_bucket" in parsed), None)
        if prefix is not None:
            found[base] = histograms(parsed, prefix + base)
    return found


def _counter_sums(parsed: Parsed, text: str) -> dict[str, dict[str, float]] | None:
    """{counter: {cache_source or "": summed value}}; None without a prompt-token counter."""
    prompt = _series(parsed, PROMPT_TOKENS)
    if not prompt:
        return None
    cached: dict[str, float] = {}
    for labels, value in _series(parsed, CACHED_TOKENS).items():
        source = dict(labels).get("cache_source", "total")
        cached[source] = cached.get(source, 0.0) + value
    if not cached and not any(p + CACHED_TOKENS in text for p in PREFIXES):
        return None  # a server without the counter: nothing to say about its cache
    return {PROMPT_TOKENS: {"": sum(prompt.values())}, CACHED_TOKENS: cached}


def cache_figure(start: dict[str, dict[str, float]] | None,
                 end: dict[str, dict[str, float]] | None) -> CacheFigure | None:
    """The level's share of the cache counters; None when either sample lacks them or a
    counter went down (the server restarted during the level)."""
    if start is None or end is None:
        return None
    prompt = end[PROMPT_TOKENS][""] - start[PROMPT_TOKENS][""]
    sources = {source: value - start[CACHED_TOKENS].get(source, 0.0)
               for source, value in end[CACHED_TOKENS].items()}
    if prompt < 0 or any(count < 0 for count in sources.values()) or not all(
            math.isfinite(value) for value in (prompt, *sources.values())):
        return None
    kept = {source: int(round(count)) for source, count in sources.items() if count > 0}
    return CacheFigure(prompt_tokens=int(round(prompt)), cached_tokens=sum(kept.values()),
                       by_source=kept)


def latency(start: Mapping[Labels, Histogram], end: Mapping[Labels, Histogram]) -> LatencyFigure:
    """The level's share of one histogram, in ms; `unavailable` says why when there is none."""
    try:
        level = delta(start, end)
    except HistogramError as exc:
        return LatencyFigure(unavailable=str(exc))
    count = int(round(level.count))
    if count <= 0:
        return LatencyFigure(unavailable="no observation during the level")
    figure = LatencyFigure(count=count, mean=round(level.sum / level.count * 1000, 3))
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        value, lower_bound = bucket_quantile(q, level)
        if value is not None:
            setattr(figure, name, round(value * 1000, 3))
        if lower_bound:
            figure.lower_bounds.append(name)
    return figure


class _Gauge:
    def __init__(self) -> None:
        self.mean, self.count, self.peak = 0.0, 0, -math.inf

    def add(self, value: float | None) -> None:
        if value is not None:
            # A running mean: a sum of finite samples near the float limit overflows to inf.
            self.count += 1
            self.mean = self.mean * ((self.count - 1) / self.count) + value / self.count
            self.peak = max(self.peak, value)

    def figure(self) -> GaugeFigure | None:
        if not self.count:
            return None
        return GaugeFigure(mean=round(self.mean, 4), max=round(self.peak, 4), samples=self.count)


class LevelSampler:
    """Start, poll and end samples of one level; `result()` once stopped."""

    def __init__(
        self,
        fetch: Callable[[], Awaitable[str]],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        gpu: GpuProbe | None = None,
        gpu_unavailable: str | None = None,
        max_scrapes: int = MAX_SCRAPES,
        max_bytes: int = MAX_SCRAPE_BYTES,
    ) -> None:
        self._fetch, self._interval = fetch, interval_s
        self._gpu, self._max_scrapes, self._max_bytes = gpu, max_scrapes, max_bytes
        self._figures = ServerFigures(interval_s=interval_s, gpu_unavailable=gpu_unavailable)
        self._gauges = {name: _Gauge() for name in GAUGES}
        self._gpu_tally = GpuTally()
        self._bytes, self._sets = 0, 0
        self._start: dict[str, dict[Labels, Histogram]] | None = None
        self._start_counts: dict[str, dict[str, float]] | None = None
        self._started_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []

    async def _scrape(self) -> str | None:
        figures = self._figures
        figures.scrapes += 1
        try:
            text = await self._fetch()
        except ScrapeFailed as exc:
            figures.scrape_failures += 1
            figures.last_failure = str(exc)
            return None
        self._bytes += len(text)
        return text

    async def start(self) -> None:
        """The start sample; polling (and GPU reads) begin only when the server has figures."""
        self._started_at = time.monotonic()
        text = await self._scrape()
        if text is None:
            self._figures.unavailable = self._figures.last_failure
        elif not any(prefix in text for prefix in PREFIXES):
            self._figures.unavailable = "/metrics carries none of sglang's series (not sglang?)"
        else:
            parsed = parse_selected(text, _HISTOGRAM_NAMES + _COUNTER_NAMES)
            self._start = _histograms(parsed)
            self._start_counts = _counter_sums(parsed, text)
            self._tasks.append(asyncio.create_task(self._poll()))
        if self._gpu is not None:
            self._tasks.append(asyncio.create_task(self._poll_gpu(self._gpu)))

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            if self._figures.scrapes >= self._max_scrapes or self._bytes >= self._max_bytes:
                self._figures.notes.append(f"periodic samples stopped at {self._figures.scrapes} "
                                           f"scrapes / {self._bytes >> 20} MiB (the level's cap)")
                return
            text = await self._scrape()
            if text is not None:
                self._add_gauges(parse_selected(text, _GAUGE_NAMES))

    def _add_gauges(self, parsed: Parsed) -> None:
        for name in GAUGES:
            values = _series(parsed, name)
            self._sets = max(self._sets, len(values))
            combine = {"token_usage": combine_usage, "spec_accept_length": combine_mean}.get(
                name, combine_requests)
            self._gauges[name].add(combine(values))

    async def _poll_gpu(self, probe: GpuProbe) -> None:
        for _ in range(self._max_scrapes):
            try:
                rows = await asyncio.to_thread(probe.query)  # nvidia-smi blocks; the load must not
            except GpuQueryFailed as exc:
                self._figures.gpu_unavailable = str(exc)
                return
            self._gpu_tally.add(rows)
            await asyncio.sleep(self._interval)

    async def stop(self, *, final: bool = True) -> None:
        """Stop polling; with `final`, take the end sample (not when the level was cut short)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._figures.gpus = self._gpu_tally.figures()
        if self._start is None:
            return
        end = None
        if final:
            text = await self._scrape()
            if text is not None:
                parsed = parse_selected(text, _HISTOGRAM_NAMES + _COUNTER_NAMES)
                end = _histograms(parsed)
                self._figures.cache = cache_figure(self._start_counts,
                                                   _counter_sums(parsed, text))
        self._figures.window_s = round(time.monotonic() - self._started_at, 3)
        self._finish(end, None if final else "the level was cut short before its end sample")

    def _finish(self, end: dict[str, dict[Labels, Histogram]] | None, cut: str | None) -> None:
        figures, start = self._figures, self._start or {}
        figures.running, figures.queued, figures.kv_usage, accept = (
            self._gauges[name].figure() for name in GAUGES)
        figures.spec_accept_length = accept if accept is not None and accept.max > 0 else None
        if figures.running is None:
            figures.notes.append(f"no gauge sample during the level (shorter than the "
                                 f"{self._interval:g}s interval, or every scrape failed)")
        if end is None:
            why = cut or f"no end sample ({figures.last_failure})"
            for field, _, _ in HISTOGRAMS:
                setattr(figures, field, LatencyFigure(unavailable=why))
        else:
            self._latencies(start, end)
        if any(
            getattr(figures, f) and getattr(figures, f).p50 is not None for f, _, _ in HISTOGRAMS
        ):
            figures.notes.append(ESTIMATE_NOTE)
        if self._sets > 1:
            figures.notes.append(COMBINE_NOTE)

    def _latencies(self, start: dict[str, dict[Labels, Histogram]],
                   end: dict[str, dict[Labels, Histogram]]) -> None:
        """Each histogram's figure over the level; "not exported" for an expected one the
        server has neither at the start nor at the end."""
        for field, base, expected in HISTOGRAMS:
            if base in end or base in start:
                setattr(self._figures, field, latency(start.get(base, {}), end.get(base, {})))
                self._sets = max(self._sets, len(end.get(base, {})))
            elif expected:
                setattr(self._figures, field, LatencyFigure(unavailable="not exported"))

    def result(self) -> ServerFigures:
        return self._figures.model_copy(deep=True)


def _gpu_choice(base_url: str, gpu: GpuProbe | None | Literal["auto"]
                ) -> tuple[GpuProbe | None, str | None]:
    if gpu is None:
        return None, "not sampled"
    if gpu == "auto":
        if not on_this_host(base_url):
            return None, "the server is not on this host (its GPUs cannot be read from here)"
        gpu = GpuProbe()
    why = gpu.unavailable()
    return (None, why) if why else (gpu, None)


@asynccontextmanager
async def sample_level(
    base_url: str, api_key: str | None, *, interval_s: float = DEFAULT_INTERVAL_S,
    client_factory: MetricsClient = metrics_client, gpu: GpuProbe | None | Literal["auto"] = "auto",
) -> AsyncIterator[LevelSampler]:
    """Sample the server (and, where it runs on this host, its GPUs) around the body.

    `gpu="auto"` reads nvidia-smi when the URL is a loopback one; pass a `GpuProbe` (e.g. with
    the profile's GPU indices) or None. The body's exception (Ctrl-C, the deadline) propagates
    after polling stops; the figures then hold the gauges so far and no histogram delta.
    """
    probe, why = _gpu_choice(base_url, gpu)
    async with client_factory(base_url, api_key) as client:
        sampler = LevelSampler(lambda: fetch_metrics(client), interval_s=interval_s, gpu=probe,
                               gpu_unavailable=why)
        await sampler.start()
        try:
            yield sampler
        except BaseException:
            await sampler.stop(final=False)
            raise
        await sampler.stop()
