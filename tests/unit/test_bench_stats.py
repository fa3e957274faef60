"""Percentile maths (linear interpolation) and per-level summaries, without a server."""

from __future__ import annotations

import pytest

from opsctl.core.errors import UsageError
from opsctl.traffic.bench.prompts import make_prompt
from opsctl.traffic.bench.stats import pcts, percentile, summarize
from opsctl.traffic.bench.sweep import parse_concurrency, parse_targets, parse_variants
from opsctl.traffic.client import RequestResult


def test_percentile_interpolates_between_closest_ranks() -> None:
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    # rank = p/100 * (n-1): p50 -> rank 2 -> 35; p90 -> rank 3.6 -> 40 + 0.6 * 10 = 46
    assert percentile(values, 50) == 35.0
    assert percentile(values, 90) == pytest.approx(46.0)
    assert percentile(values, 0) == 15.0
    assert percentile(values, 100) == 50.0


def test_percentile_ignores_input_order_and_handles_one_value() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([7.0], 99) == 7.0


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_pcts_are_milliseconds_and_none_when_nothing_was_measured() -> None:
    assert set(pcts([]).model_dump().values()) == {None}
    measured = pcts([0.010, 0.020, 0.030])
    assert (measured.p50, measured.mean) == (pytest.approx(20.0), pytest.approx(20.0))
    assert (measured.p95, measured.max) == (pytest.approx(29.0), pytest.approx(30.0))
    # Population standard deviation (numpy's default, sglang.bench_serving's): sqrt(200/3).
    assert measured.std == pytest.approx(8.165, abs=1e-3)
    assert measured.p99 == pytest.approx(29.8)


def _ok(ttft: float, e2e: float, tokens: int, gaps: list[float]) -> RequestResult:
    return RequestResult(ok=True, ttft_s=ttft, e2e_s=e2e, output_tokens=tokens, itl_s=gaps,
                         token_source="usage", prompt_tokens=100, finish_reason="length")


def test_tpot_is_decode_time_over_tokens_after_the_first() -> None:
    result = _ok(ttft=0.5, e2e=2.5, tokens=11, gaps=[0.2] * 10)
    assert result.tpot_s == pytest.approx(0.2)
    assert _ok(ttft=0.5, e2e=0.5, tokens=1, gaps=[]).tpot_s is None


def test_tpot_and_itl_are_not_measurable_when_the_answer_came_in_one_chunk() -> None:
    one_chunk = _ok(ttft=0.5, e2e=0.5, tokens=64, gaps=[])
    one_chunk.content_chunks = 1
    assert one_chunk.tpot_s is None  # not ~0: nothing was timed between tokens
    level = summarize(1, [one_chunk], [], duration_s=1.0)
    assert level.tpot_ms.p50 is None and level.itl_ms.p50 is None
    assert (level.itl_note or "").startswith("not measurable: 1 answer(s) arrived in 1 text chunk")
    assert level.output_tokens_per_s == 64.0 and level.text_chunks == 1


def test_summarize_counts_failures_including_warmup_and_pools_gaps() -> None:
    measured = [
        _ok(0.1, 1.1, 11, [0.1] * 10),
        _ok(0.3, 2.3, 11, [0.2] * 10),
        RequestResult(ok=False, error_kind="stream_cut", error="stream closed early"),
    ]
    warmup = [RequestResult(ok=False, error_kind="timeout", error="no response")]
    level = summarize(4, measured, warmup, duration_s=2.0)
    assert (level.requests, level.completed, level.failed, level.warmup_failed) == (3, 2, 1, 1)
    assert level.errors == {"stream_cut": 1, "timeout": 1}
    assert level.output_tokens == 22
    assert level.output_tokens_per_s == pytest.approx(11.0)
    assert level.requests_per_s == pytest.approx(1.0)
    assert level.ttft_ms.p50 == pytest.approx(200.0)
    assert level.itl_ms.p50 == pytest.approx(150.0)  # 20 pooled gaps: ten 100 ms, ten 200 ms
    assert level.tpot_ms.p50 == pytest.approx(150.0)  # per request: 100 ms and 200 ms
    assert level.token_count_source == "usage"


def test_summarize_masks_the_api_key_in_error_examples() -> None:
    key = "sk-secret-sentinel-9876"
    failed = RequestResult(ok=False, error_kind="http_status", error=f"HTTP 401: bad key {key}")
    level = summarize(1, [failed], [], duration_s=1.0, api_key=key)
    assert key not in level.model_dump_json()
    assert "****9876" in level.error_examples[0]


def test_prompts_are_deterministic_unique_and_sized() -> None:
    assert make_prompt(3, 64) == make_prompt(3, 64)
    assert make_prompt(3, 64) != make_prompt(4, 64)
    assert len(make_prompt(0, 64).split()) == 64


def test_parse_concurrency() -> None:
    assert parse_concurrency("1,2, 4") == (1, 2, 4)
    for bad in ("", "0", "1,x", "-2", "1,99999999"):
        with pytest.raises(UsageError):
            parse_concurrency(bad)
    assert parse_concurrency("10000") == (10_000,)


def test_parse_variants_keeps_order_and_drops_blanks() -> None:
    assert parse_variants(" baseline, gathercast,") == ("baseline", "gathercast")
    assert parse_variants(None) == ()
    for blank in ("", ",", " , "):  # given but naming none: never "every variant"
        with pytest.raises(UsageError, match="names no variant"):
            parse_variants(blank)


def test_parse_targets_names_urls() -> None:
    named = parse_targets(["baseline=http://a:1", "gc=http://b:2"], [])
    assert [(t.label, t.base_url) for t in named] == [("baseline", "http://a:1"),
                                                      ("gc", "http://b:2")]
    by_variant = parse_targets(["http://a:1", "http://b:2"], ["baseline", "gathercast"])
    assert [t.label for t in by_variant] == ["baseline", "gathercast"]
    assert [t.label for t in parse_targets(["http://a:1/"], [])] == ["a:1"]
    with pytest.raises(UsageError):
        parse_targets(["x=http://a:1", "x=http://b:2"], [])


def test_variant_names_must_match_the_urls() -> None:
    """Three names for two URLs was silently ignored; now it is a usage error (exit 2)."""
    with pytest.raises(UsageError, match="--variants names 3, --base-url gives 2"):
        parse_targets(["http://a:1", "http://b:2"], ["a", "b", "c"])
    named = parse_targets(["http://a:1", "http://b:2"], ["x", "y"])
    assert [t.label for t in named] == ["x", "y"]
