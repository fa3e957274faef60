"""sglang 0.5.23's Prometheus series, observed from the simulated requests.

Names, types, label names and default buckets are those of
``srt/observability/metrics_collector.py`` (TokenizerMetricsCollector, SchedulerMetricsCollector)
and ``srt/observability/http_request_metrics.py``; label values follow
``tokenizer_metric_labels()`` and ``SchedulerMetricsCollector.init_new()`` for one unified
(non-disaggregated) server on TP rank 0. Only the series opsctl uses are simulated.

Differences from the real endpoint, on purpose: sglang serves these through prometheus_client's
multiprocess collector, which prints "Multiprocess metric" as every HELP text and no ``_created``
samples; here the HELP texts are sglang's documentation strings and ``_created`` is left out too.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from opsctl.sim.config import SimArgs

# metrics_collector.py, TokenizerMetricsCollector.__init__ defaults.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = TTFT_BUCKETS + (600, 1200, 1800, 2400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
    0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)
PROMPT_TOKENS_BUCKETS = (
    100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
    12500, 15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000,
    100000, 200000, 300000, 400000, 600000, 800000, 1000000, 1100000,
)
# SchedulerMetricsCollector.queue_time buckets.
QUEUE_TIME_BUCKETS = (
    0.000, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40,
    50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600,
    1800, 2000, 2500, 3000,
)
# TokenizerMetricsCollector.emit_startup_time phases.
STARTUP_PHASES = ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e")


class SchedulerView(Protocol):
    """What the scheduler gauges read at scrape time."""

    def running(self) -> int: ...
    def queued(self) -> int: ...
    def used_tokens(self) -> int: ...
    def token_usage(self) -> float: ...
    def gen_throughput(self) -> float: ...
    def max_total_num_tokens(self) -> int: ...
    def spec_accept_length(self) -> float: ...


def tokenizer_labels(args: SimArgs) -> dict[str, str]:
    labels = {"model_name": args.served_model_name, "engine_type": "unified"}
    labels.update(args.extra_metric_labels)
    return labels


def scheduler_labels(args: SimArgs) -> dict[str, str]:
    labels = {
        "model_name": args.served_model_name,
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }
    labels.update(args.extra_metric_labels)
    return labels


class _WithoutCreated:
    """Hides ``*_created`` samples, which sglang's multiprocess registry never shows."""

    def __init__(self, inner: CollectorRegistry) -> None:
        self._inner = inner

    def collect(self) -> Iterator[Any]:
        for family in self._inner.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


def _bucket_list(override: list[float] | None, default: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(override) if override else default


class SglangMetrics:
    """The registry behind /metrics and the observe_* calls the engine and API make."""

    def __init__(self, args: SimArgs, release: str = "0.5.23") -> None:
        self._inner = CollectorRegistry(auto_describe=True)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_WithoutCreated(self._inner))
        self.tok_labels = tokenizer_labels(args)
        self.sched_labels = scheduler_labels(args)
        tok = list(self.tok_labels)
        tok_stream = [*tok, "is_streaming"]
        sched = list(self.sched_labels)
        reg = self._inner

        # Only 0.5.23 exports these two of the series below: 0.5.15 has no startup-phase
        # gauge and no per-request TPOT histogram (0.5.23 observability/metrics_collector.py:
        # 1842-1843, 2057-2058; a real 0.5.15 server's page, tests/fixtures/real-sglang-0.5.15/).
        newest = release == "0.5.23"
        self.startup_time_seconds = Gauge(
            "sglang:startup_time_seconds", "Engine startup duration by phase in seconds.",
            [*tok, "phase"], registry=reg) if newest else None
        self.prompt_tokens_total = Counter(
            "sglang:prompt_tokens_total", "Number of prefill tokens processed.",
            tok_stream, registry=reg)
        self.generation_tokens_total = Counter(
            "sglang:generation_tokens_total", "Number of generation tokens processed.",
            tok_stream, registry=reg)
        self.prompt_tokens_histogram = Histogram(
            "sglang:prompt_tokens_histogram", "Histogram of prompt token length.",
            tok, buckets=PROMPT_TOKENS_BUCKETS, registry=reg)
        self.uncached_prompt_tokens_histogram = Histogram(
            "sglang:uncached_prompt_tokens_histogram",
            "Histogram of uncached (compute) prompt token length.",
            tok, buckets=PROMPT_TOKENS_BUCKETS, registry=reg)
        self.generation_tokens_histogram = Histogram(
            "sglang:generation_tokens_histogram", "Histogram of generation token length.",
            tok, buckets=PROMPT_TOKENS_BUCKETS, registry=reg)
        self.cached_tokens_total = Counter(
            "sglang:cached_tokens_total",
            "Number of cached prompt tokens by source (device/host/storage).",
            [*tok, "cache_source"], registry=reg)
        self.num_requests_total = Counter(
            "sglang:num_requests_total", "Number of requests processed.",
            tok_stream, registry=reg)
        # Per decode token here; real sglang adds the tokens of each log interval
        # (0.5.23 observability/metrics_collector.py:1032-1039, 1558-1571).
        self.realtime_tokens_total = Counter(
            "sglang:realtime_tokens_total",
            "Total number of tokens processed (updated on each log interval). "
            "mode: prefill_compute, prefill_cache, decode.",
            [*sched, "mode"], registry=reg)
        self.num_aborted_requests_total = Counter(
            "sglang:num_aborted_requests_total", "Number of requests aborted.",
            tok, registry=reg)
        self.time_to_first_token = Histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            tok_stream, registry=reg,
            buckets=_bucket_list(args.bucket_time_to_first_token, TTFT_BUCKETS))
        itl_buckets = _bucket_list(args.bucket_inter_token_latency, ITL_BUCKETS)
        self.inter_token_latency = Histogram(
            "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            tok, buckets=itl_buckets, registry=reg)
        self.request_time_per_output_token = Histogram(
            "sglang:request_time_per_output_token_seconds",
            "Per-request TPOT in seconds: (finished_time - first_token_time) / "
            "(completion_tokens - 1).",
            tok_stream, buckets=itl_buckets, registry=reg) if newest else None
        self.e2e_request_latency = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            tok_stream, registry=reg,
            buckets=_bucket_list(args.bucket_e2e_request_latency, E2E_BUCKETS))

        self._sched_gauges: dict[str, Gauge] = {}
        for name, doc in (
            ("num_running_reqs", "The number of running requests."),
            ("num_queue_reqs", "The number of requests in the waiting queue."),
            ("gen_throughput", "The generation throughput (token/s)."),
            ("cache_hit_rate", "The prefix cache hit rate."),
            ("token_usage", "The token usage."),
            ("num_used_tokens", "The number of used tokens."),
            ("kv_used_tokens", "Number of actively used token slots in the KV cache pool."),
            ("kv_available_tokens", "Number of free token slots in the KV cache pool."),
            ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
            ("context_len", "Maximum context length."),
            ("is_cuda_graph", "Whether the batch is using CUDA graph."),
            # 0.5.23 observability/metrics_collector.py:511-516; 0 without speculation.
            ("spec_accept_length", "Mean acceptance length of speculative decoding (accepted "
             "drafts + bonus token per forward)."),
        ):
            self._sched_gauges[name] = Gauge(f"sglang:{name}", doc, sched, registry=reg)
        self.queue_time = Histogram(
            "sglang:queue_time_seconds", "Histogram of queueing time in seconds.",
            sched, buckets=QUEUE_TIME_BUCKETS, registry=reg)

        # http_request_metrics.py: no model labels on these.
        self.http_requests_total = Counter(
            "sglang:http_requests_total", "Total number of HTTP requests by endpoint and method",
            ["endpoint", "method"], registry=reg)
        self.http_responses_total = Counter(
            "sglang:http_responses_total",
            "Total number of HTTP responses by endpoint and status code",
            ["endpoint", "status_code", "method"], registry=reg)
        self.http_requests_active = Gauge(
            "sglang:http_requests_active", "Number of currently active HTTP requests",
            ["endpoint", "method"], registry=reg)
        self._context_len = args.context_length

    # -- scheduler side -------------------------------------------------------------------------

    def bind_scheduler(self, view: SchedulerView) -> None:
        """Scheduler gauges read the engine's live state whenever /metrics is scraped."""
        readers: Mapping[str, Callable[[], float]] = {
            "num_running_reqs": lambda: float(view.running()),
            "num_queue_reqs": lambda: float(view.queued()),
            "gen_throughput": view.gen_throughput,
            "cache_hit_rate": lambda: 0.0,
            "token_usage": view.token_usage,
            "num_used_tokens": lambda: float(view.used_tokens()),
            "kv_used_tokens": lambda: float(view.used_tokens()),
            "kv_available_tokens": lambda: float(
                max(view.max_total_num_tokens() - view.used_tokens(), 0)),
            "max_total_num_tokens": lambda: float(view.max_total_num_tokens()),
            "context_len": lambda: float(self._context_len),
            "is_cuda_graph": lambda: 1.0 if view.running() else 0.0,
            "spec_accept_length": view.spec_accept_length,
        }
        for name, read in readers.items():
            self._sched_gauges[name].labels(**self.sched_labels).set_function(read)

    def observe_queue_time(self, seconds: float) -> None:
        self.queue_time.labels(**self.sched_labels).observe(seconds)

    # -- tokenizer side -------------------------------------------------------------------------

    def set_startup_time(self, phases: Mapping[str, float]) -> None:
        if self.startup_time_seconds is None:
            return
        for phase in STARTUP_PHASES:
            self.startup_time_seconds.labels(**self.tok_labels, phase=phase).set(
                phases.get(phase, 0.0))

    def _stream_labels(self, stream: bool) -> dict[str, str]:
        return {**self.tok_labels, "is_streaming": "true" if stream else "false"}

    def observe_time_to_first_token(self, seconds: float, stream: bool) -> None:
        self.time_to_first_token.labels(**self._stream_labels(stream)).observe(seconds)

    def observe_inter_token_latency(self, seconds: float) -> None:
        self.inter_token_latency.labels(**self.tok_labels).observe(seconds)
        self.realtime_tokens_total.labels(**self.sched_labels, mode="decode").inc()

    def observe_finished(
        self,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        e2e_seconds: float,
        time_per_output_token: float | None,
        stream: bool,
    ) -> None:
        """TokenizerMetricsCollector.observe_one_finished_request with no cached tokens."""
        stream_labels = self._stream_labels(stream)
        self.prompt_tokens_total.labels(**stream_labels).inc(prompt_tokens)
        self.generation_tokens_total.labels(**stream_labels).inc(completion_tokens)
        self.num_requests_total.labels(**stream_labels).inc()
        self.e2e_request_latency.labels(**stream_labels).observe(e2e_seconds)
        if time_per_output_token is not None and self.request_time_per_output_token is not None:
            self.request_time_per_output_token.labels(**stream_labels).observe(
                time_per_output_token)
        self.prompt_tokens_histogram.labels(**self.tok_labels).observe(prompt_tokens)
        self.uncached_prompt_tokens_histogram.labels(**self.tok_labels).observe(prompt_tokens)
        self.generation_tokens_histogram.labels(**self.tok_labels).observe(completion_tokens)

    def observe_aborted(self) -> None:
        self.num_aborted_requests_total.labels(**self.tok_labels).inc()

    # -- HTTP middleware ------------------------------------------------------------------------

    def http_started(self, endpoint: str, method: str) -> None:
        self.http_requests_total.labels(endpoint=endpoint, method=method).inc()
        self.http_requests_active.labels(endpoint=endpoint, method=method).inc()

    def http_finished(self, endpoint: str, method: str, status: int) -> None:
        self.http_responses_total.labels(
            endpoint=endpoint, method=method, status_code=str(status)).inc()
        self.http_requests_active.labels(endpoint=endpoint, method=method).dec()

    # -- exposition -----------------------------------------------------------------------------

    def render(self, accept: str, accept_encoding: str) -> tuple[bytes, dict[str, str]]:
        """Body and headers as prometheus_client's ASGI app would answer."""
        encoder, content_type = choose_encoder(accept)
        body = encoder(self.registry)
        headers = {"content-type": content_type}
        if "gzip" in accept_encoding:
            body = gzip.compress(body)
            headers["content-encoding"] = "gzip"
        return body, headers
