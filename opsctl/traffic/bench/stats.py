"""Latency statistics: percentiles, and the summary of one concurrency level of a sweep.

Percentiles use linear interpolation between closest ranks, the same definition as numpy's
default (`method="linear"`) and sglang's benchmark (which calls `np.percentile`): for sorted
values x[0..n-1] and p in [0, 100], the rank is r = p/100 * (n-1); the result is
x[floor(r)] + (r - floor(r)) * (x[floor(r)+1] - x[floor(r)]). The standard deviation is the
population one (divide by n), numpy's default and what sglang.bench_serving reports.

Goodput counts the measured requests that meet every limit of the profile's SLO
(opsctl.config.sloconfig.request_is_good: a missing TTFT or TPOT does not meet its limit).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from opsctl.config.sloconfig import Slo
from opsctl.core.redact import redact
from opsctl.traffic.bench.records import judge, peaks
from opsctl.traffic.bench.report import CLIENT_BOUND_SHARE, Goodput, LevelResult, Pcts
from opsctl.traffic.client import RequestResult

_ERROR_EXAMPLES = 3  # distinct failure messages kept per level


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile {p} outside 0..100")
    ordered = sorted(values)
    rank = p / 100.0 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def pcts(values_s: Sequence[float]) -> Pcts:
    """p50/p90/p95/p99, mean, std and max of durations in seconds, reported in milliseconds."""
    if not values_s:
        return Pcts()
    ms = [v * 1000.0 for v in values_s]
    mean = sum(ms) / len(ms)
    return Pcts(
        p50=round(percentile(ms, 50), 4), p90=round(percentile(ms, 90), 4),
        p95=round(percentile(ms, 95), 4), p99=round(percentile(ms, 99), 4),
        mean=round(mean, 4), std=round(math.sqrt(sum((v - mean) ** 2 for v in ms) / len(ms)), 4),
        max=round(max(ms), 4),
    )


def goodput(slo: Slo, measured: Sequence[RequestResult], duration_s: float) -> Goodput:
    """The measured requests meeting every stated limit: how many, their share of all measured
    requests (failures included), their rate over the measured wall time, and each limit's
    own share (records.judge)."""
    return judge(slo, [(r.ok, r.ttft_s, r.tpot_s) for r in measured], duration_s)


def summarize(
    concurrency: int, measured: list[RequestResult], warmup: list[RequestResult],
    duration_s: float, api_key: str | None = None, *, aborted: str | None = None,
    in_flight_cut: int = 0, slo: Slo | None = None,
) -> LevelResult:
    """One level: latencies of the measured successes, failures of both phases by kind.

    Throughput is over `duration_s`, the measured phase's wall time; ITL gaps are pooled over
    all requests, TPOT is per request. Token counts are never negative (the client rejects such
    usage), so neither is throughput.
    """
    ok = [r for r in measured if r.ok]
    flagged = [r for r in measured + warmup if r.usage_note]
    peak_tokens, peak_running = peaks(ok)
    return LevelResult(
        concurrency=concurrency,
        **_outcomes(measured, warmup, api_key),
        duration_s=round(duration_s, 4),
        **_throughput(ok, duration_s),
        **_latencies(ok),
        usage_flagged=len(flagged),
        usage_notes=_examples([r.usage_note or "" for r in flagged], api_key),
        aborted=aborted,
        in_flight_cut=in_flight_cut,
        goodput=_stated_goodput(slo, measured, duration_s),
        max_output_tokens_per_s=peak_tokens, max_concurrent_requests=peak_running,
    )


def _outcomes(measured: list[RequestResult], warmup: list[RequestResult],
              api_key: str | None) -> dict[str, Any]:
    """How many requests each phase sent and how many failed; the failures by kind."""
    completed = sum(1 for r in measured if r.ok)
    failures = [r for r in measured + warmup if not r.ok]
    return {
        "requests": len(measured),
        "completed": completed,
        "failed": len(measured) - completed,
        "warmup_requests": len(warmup),
        "warmup_failed": sum(1 for r in warmup if not r.ok),
        "errors": dict(Counter(str(r.error_kind or "unknown") for r in failures)),
        "error_examples": _examples([f"{r.error_kind}: {r.error}" for r in failures], api_key),
    }


def _rate(amount: float, duration_s: float, digits: int) -> float:
    """`amount` per second of `duration_s`, 0 over no time."""
    return round(amount / duration_s, digits) if duration_s > 0 else 0.0


def _throughput(ok: list[RequestResult], duration_s: float) -> dict[str, Any]:
    """Tokens in and out of the successes and their rates; the input side only when every
    success reported its prompt's tokens."""
    output_tokens = sum(r.output_tokens for r in ok)
    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens]
    all_counted = bool(ok) and len(prompt_counts) == len(ok)
    input_tokens = sum(prompt_counts) if all_counted else None
    input_rate = None
    if input_tokens is not None and duration_s > 0:
        input_rate = _rate(input_tokens, duration_s, 3)
    prompt_mean = None
    if prompt_counts:
        prompt_mean = round(sum(prompt_counts) / len(prompt_counts), 2)
    return {
        "output_tokens": output_tokens,
        "prompt_tokens_mean": prompt_mean,
        "input_tokens": input_tokens,
        "input_tokens_per_s": input_rate,
        "output_tokens_per_s": _rate(output_tokens, duration_s, 3),
        "requests_per_s": _rate(len(ok), duration_s, 4),
    }


def _latencies(ok: list[RequestResult]) -> dict[str, Any]:
    """The successes' latency percentiles and where their token counts came from."""
    return {
        "ttft_ms": pcts([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_ms": pcts([gap for r in ok for gap in r.itl_s]),
        "tpot_ms": pcts([t for r in ok if (t := r.tpot_s) is not None]),
        "e2e_ms": pcts([r.e2e_s for r in ok if r.e2e_s is not None]),
        "token_count_source": "+".join(sorted({r.token_source for r in ok})) or "none",
        "text_chunks": sum(r.content_chunks for r in ok),
        "itl_note": itl_note(ok),
    }


def _stated_goodput(slo: Slo | None, measured: list[RequestResult],
                    duration_s: float) -> Goodput | None:
    """Goodput under `slo` when it states a TTFT or TPOT limit, else None."""
    if slo is None or (slo.ttft is None and slo.tpot is None):
        return None
    return goodput(slo, measured, duration_s)


def with_client_cpu(level: LevelResult, cpu_s: float, wall_s: float, *,
                    busiest_share: float | None = None, workers: int = 1,
                    cores: int | None = None) -> LevelResult:
    """The level with the client's own CPU time (every client process: the sweep's and its
    workers'), per streamed output token, and whether the client may have been the limit: its
    busiest process used more than CLIENT_BOUND_SHARE of a core (its event loop was then late to
    the chunks it timed), or all of them that share of the `cores` they may run on.
    `busiest_share` defaults to the one process's share."""
    share = cpu_s / wall_s if wall_s > 0 else None
    busiest = share if busiest_share is None else busiest_share
    return level.model_copy(update={
        "client_workers": workers,
        "client_cpu_s": round(cpu_s, 4),
        "client_cpu_share": None if share is None else round(share, 4),
        "client_cpu_us_per_token": round(cpu_s / level.output_tokens * 1e6, 2)
        if level.output_tokens else None,
        "client_bound": (busiest is not None and busiest > CLIENT_BOUND_SHARE)
        or (share is not None and cores is not None and share > CLIENT_BOUND_SHARE * cores),
    })


def itl_note(ok: Sequence[RequestResult]) -> str | None:
    """Why ITL is not a per-token figure here, or None when every gap is one token apart."""
    streamed = [r for r in ok if r.content_chunks]
    if not streamed:
        return None
    chunks = sum(r.content_chunks for r in streamed)
    tokens = sum(r.output_tokens for r in streamed)
    if not any(r.itl_s for r in streamed):
        return (f"not measurable: {len(streamed)} answer(s) arrived in {chunks} text chunk(s) "
                f"for {tokens} tokens (a stream needs two text chunks for a gap)")
    if any(r.itl_split for r in streamed):
        return "chunks of several tokens split into equal gaps by the server's per-chunk counts"
    if tokens > chunks:
        return f"per chunk, not per token: {tokens} tokens arrived in {chunks} text chunks"
    return None


def _examples(messages: Sequence[str], api_key: str | None) -> list[str]:
    """The first few distinct messages, redacted."""
    examples: list[str] = []
    for message in messages:
        message = redact(message, api_key)
        if message not in examples and len(examples) < _ERROR_EXAMPLES:
            examples.append(message)
    return examples
