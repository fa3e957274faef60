"""The OpenAI client against a hostile server over real HTTP on loopback (tests/hostile.py).

Every hostile answer becomes a failed request with a one-line reason (or, for answers the
ecosystem accepts, a success with honest numbers); none raises, none grows memory past a cap.
"""

from __future__ import annotations

import asyncio

import pytest
from hostile import MALFORMED, HostileServer

from opsctl.core.httpcap import MAX_BODY_BYTES, MAX_SSE_LINE_BYTES, MAX_STREAM_BYTES
from opsctl.traffic.bench.stats import summarize
from opsctl.traffic.client import (
    RequestResult,
    generate,
    make_client,
    request_body,
    stream_generate,
)
from opsctl.traffic.payload import Api
from opsctl.traffic.served import list_models

APIS: tuple[Api, ...] = ("completions", "chat")


def ask(server: HostileServer, api: Api, *, stream: bool, max_tokens: int = 16,
        key: str | None = None) -> RequestResult:
    async def go() -> RequestResult:
        async with make_client(server.url, key, timeout_s=10.0) as client:
            body = request_body(api, "hostile-model", "hi", max_tokens=max_tokens, stream=stream)
            send = stream_generate if stream else generate
            return await send(client, api, body, timeout_s=15.0)

    return asyncio.run(go())


def failed(result: RequestResult, kind: str, *words: str) -> None:
    assert not result.ok and result.error_kind == kind, (result.error_kind, result.error)
    message = result.error or ""
    assert "\n" not in message and message == " ".join(message.split())
    for word in words:
        assert word in message, message


def test_caps_are_stated_as_constants() -> None:
    assert (MAX_BODY_BYTES, MAX_STREAM_BYTES, MAX_SSE_LINE_BYTES) == (8 << 20, 64 << 20, 1 << 20)


@pytest.mark.parametrize("api", APIS)
def test_an_endless_body_stops_at_the_cap(api: Api) -> None:
    with HostileServer("endless_body", max_seconds=60) as server:
        result = ask(server, api, stream=False)
        failed(result, "too_large", "exceeds the 8 MiB cap")
        # opsctl hung up: the server did not get to send anywhere near its own bound.
        assert server.bytes_sent < 4 * MAX_BODY_BYTES


@pytest.mark.parametrize("api", APIS)
def test_an_sse_line_without_end_stops_at_the_line_cap(api: Api) -> None:
    with HostileServer("endless_sse_line", max_seconds=60) as server:
        failed(ask(server, api, stream=True), "too_large", "SSE line exceeds the 1 MiB cap")
        assert server.bytes_sent < 16 * MAX_SSE_LINE_BYTES


def test_an_endless_model_list_is_a_one_line_error() -> None:
    async def go(server: HostileServer) -> str:
        async with make_client(server.url, None, timeout_s=10.0) as client:
            with pytest.raises(ValueError) as caught:
                await list_models(client, 30.0)
            return str(caught.value)

    with HostileServer("endless_models", max_seconds=60) as server:
        message = asyncio.run(go(server))
        assert "GET /v1/models" in message and "exceeds the 8 MiB cap" in message
        assert server.bytes_sent < 4 * MAX_BODY_BYTES


@pytest.mark.parametrize("mode", ["close_models", "html_502", "empty_models"])
def test_model_list_failures_are_one_line(mode: str) -> None:
    async def go(server: HostileServer) -> list[str] | str:
        async with make_client(server.url, None, timeout_s=10.0) as client:
            try:
                return await list_models(client, 10.0)
            except ValueError as exc:
                return str(exc)

    with HostileServer(mode) as server:
        answer = asyncio.run(go(server))
    if mode == "empty_models":
        assert answer == []  # the caller says "lists no model"
    else:
        assert isinstance(answer, str) and "\n" not in answer and "GET /v1/models" in answer


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("api", APIS)
def test_closed_without_answer(api: Api, stream: bool) -> None:
    with HostileServer("close") as server:
        failed(ask(server, api, stream=stream), "stream_cut", "without sending a response")


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_answers_fail_with_a_reason(name: str, api: Api, stream: bool) -> None:
    with HostileServer("malformed", malformed=name) as server:
        result = ask(server, api, stream=stream)
    # A field the API does not read (chat ignores `text`) leaves nothing generated: "empty".
    assert not result.ok and result.error_kind in ("bad_response", "empty"), result
    assert result.error and "\n" not in result.error


@pytest.mark.parametrize(("name", "reason"), [
    ("choices_string", "choices is a string, expected a list"),
    ("choices_numbers", "choices[0] is a number, expected an object"),
    ("choice_text_number", "choices[0].text is a number, expected a string"),
    ("finish_reason_list", "choices[0].finish_reason is a list, expected a string"),
    ("payload_list", "expected a JSON object, got a list"),
    ("usage_tokens_negative", "usage.completion_tokens=-5 is not a non-negative integer"),
    ("usage_tokens_float", "usage.completion_tokens=1.5 is not a non-negative integer"),
    ("usage_tokens_string", 'usage.completion_tokens="7" is not a non-negative integer'),
    ("usage_tokens_bool", "usage.prompt_tokens=true is not a non-negative integer"),
])
def test_each_malformed_field_is_named(name: str, reason: str) -> None:
    with HostileServer("malformed", malformed=name) as server:
        failed(ask(server, "completions", stream=True), "bad_response", reason)
        failed(ask(server, "completions", stream=False), "bad_response", reason)


@pytest.mark.parametrize(("mode", "reason"), [
    ("non_utf8", "not UTF-8 (byte 0xff"),
    ("invalid_json", "not JSON"),
    ("deep_json", "JSON nested too deeply"),
])
@pytest.mark.parametrize("stream", [True, False])
def test_undecodable_answers(mode: str, reason: str, stream: bool) -> None:
    with HostileServer(mode) as server:
        failed(ask(server, "completions", stream=stream), "bad_response", reason)


@pytest.mark.parametrize("stream", [True, False])
def test_an_html_error_page_is_one_line(stream: bool) -> None:
    with HostileServer("html_502") as server:
        failed(ask(server, "chat", stream=stream), "http_status", "HTTP 502", "502 Bad Gateway")


@pytest.mark.parametrize("api", APIS)
def test_a_stream_ending_after_finish_reason_without_done_is_complete(api: Api) -> None:
    with HostileServer("no_done") as server:
        result = ask(server, api, stream=True)
    assert result.ok and result.finish_reason == "stop"
    assert result.text == "one two three four five"
    assert (result.output_tokens, result.token_source) == (5, "chunks")  # no usage chunk came
    assert len(result.itl_s) == 4 and result.tpot_s is not None


@pytest.mark.parametrize("mode", ["cut", "cut_unclean"])
@pytest.mark.parametrize("api", APIS)
def test_a_stream_cut_before_any_finish_reason_fails(mode: str, api: Api) -> None:
    with HostileServer(mode) as server:
        result = ask(server, api, stream=True)
    words = ("before any finish_reason",) if mode == "cut" else ("stream ended early",)
    failed(result, "stream_cut", *words)


@pytest.mark.parametrize("api", APIS)
def test_one_chunk_for_the_whole_answer_leaves_itl_not_measurable(api: Api) -> None:
    with HostileServer("one_chunk") as server:
        result = ask(server, api, stream=True)
    assert result.ok and result.content_chunks == 1 and result.itl_s == []
    assert result.tpot_s is None and result.ttft_s is not None
    level = summarize(1, [result], [], duration_s=1.0)
    assert level.itl_ms.p50 is None and level.tpot_ms.p50 is None
    assert (level.itl_note or "").startswith("not measurable")
    assert level.completed == 1 and level.failed == 0


@pytest.mark.parametrize("api", APIS)
def test_multi_token_chunks_split_by_the_servers_own_counts(api: Api) -> None:
    with HostileServer("multi_token") as server:
        result = ask(server, api, stream=True)
    # 4 chunks of 4 tokens: 3 gaps between chunks, each split into 4 equal per-token gaps.
    assert result.ok and result.itl_split and len(result.itl_s) == 12
    assert (result.output_tokens, result.token_source) == (16, "usage")
    assert all(result.itl_s[i] == result.itl_s[i - i % 4] for i in range(12))
    assert "split" in (summarize(1, [result], [], 1.0).itl_note or "")


@pytest.mark.parametrize(("max_tokens", "usage", "rule"), [
    (16, 1000, "exceeds max_tokens=16"),
    (4096, 1000, "more than 4 per byte and chunk"),
    (4096, 2, "fewer than the 3 chunks that carried text"),
])
def test_usage_the_stream_contradicts_is_flagged_and_not_believed(
        max_tokens: int, usage: int, rule: str) -> None:
    with HostileServer("inflated_usage", usage_tokens=usage) as server:
        result = ask(server, "completions", stream=True, max_tokens=max_tokens)
    assert result.ok and rule in (result.usage_note or "")
    assert (result.output_tokens, result.token_source) == (3, "chunks")
    level = summarize(1, [result], [], duration_s=1.0)
    assert level.usage_flagged == 1 and rule in level.usage_notes[0]
    assert level.output_tokens_per_s == 3.0  # the inflated count never reaches throughput


def test_usage_within_the_rule_is_believed() -> None:
    with HostileServer("inflated_usage", usage_tokens=6) as server:
        result = ask(server, "completions", stream=True, max_tokens=16)
    assert result.ok and result.usage_note is None
    assert (result.output_tokens, result.token_source) == (6, "usage")


def test_negative_usage_never_becomes_negative_throughput() -> None:
    with HostileServer("malformed", malformed="usage_tokens_negative") as server:
        results = [ask(server, "completions", stream=True) for _ in range(2)]
    level = summarize(2, results, [], duration_s=1.0)
    assert level.failed == 2 and level.output_tokens == 0 and level.output_tokens_per_s == 0.0


def test_the_key_is_sent_on_every_request() -> None:
    key = "sk-hostile-sentinel-key-4242"
    with HostileServer("auth", key=key) as server:
        failed(ask(server, "chat", stream=True), "http_status", "HTTP 401")
        assert ask(server, "chat", stream=True, key=key).ok
        assert ask(server, "chat", stream=False, key=key).ok
        authorised = [r.headers.get("authorization") for r in server.requests]
    assert authorised == [None, f"Bearer {key}", f"Bearer {key}"]
