"""The one HTTP client smoke and bench share: OpenAI-compatible requests, timed, never guessing.

A request never raises for a server-side problem: it returns a `RequestResult` whose `error`
says what went wrong (connect, timeout, http status, stream cut, error event, malformed or
oversized answer), so a sweep can count failures instead of aborting. Every answer is read
under the byte caps of opsctl.core.httpcap and checked by opsctl.traffic.payload.

Streams as the ecosystem defines them: a stream is complete at `data: [DONE]`, or when the
connection closes cleanly after a chunk carrying a finish_reason (servers that never send
`[DONE]` exist, and the OpenAI SDK accepts them); closing before any finish_reason is a cut.

Generation goes through opsctl.traffic.wire (aiohttp, a C HTTP parser); the control plane
(model list, /model_info, readiness, /metrics) through httpx: `TrafficClient` is an httpx
AsyncClient that also owns the generation session. One stream state machine (`_Stream`, fed
lines by the wire, each chunk checked by opsctl.traffic.payload.parse_piece) judges every stream.

Timing uses `time.perf_counter()`: a request's clock starts when its headers are written (after
its connection is obtained), and each SSE line is timed when the read that completed it
returned. ITL gaps are measured between successive chunks that carry generated text. A chunk
that carries k > 1 tokens is split into k equal gaps only when the server says how many it
carried (a cumulative usage count in every chunk, as sglang's and vLLM's
`continuous_usage_stats` send); otherwise gaps stay per chunk and the result records chunks
against tokens. With fewer than two text chunks there is no gap to measure: ITL and TPOT are
then "not measurable", not zero.

Usage counts are believed only when the stream agrees (the tolerant rule): completion_tokens
must not exceed the request's max_tokens, must be at least the number of chunks that carried
text (each carries at least one new token), and at most 4 tokens per byte of streamed text and
per chunk (`4 x (text bytes + chunks)`; real tokenizers average 3-4 bytes per token, so this
only catches counts no stream could have produced). A count that breaks the rule is flagged
in `usage_note` and the counted chunks are used instead, so an inflated count never inflates
throughput.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol

import httpx

from opsctl.core.answers import Malformed, decode_json
from opsctl.core.errors import UsageError
from opsctl.core.httpcap import IDENTITY, capped_async_transport
from opsctl.core.redact import auth_headers
from opsctl.traffic.payload import Api, Piece, body_message, parse_piece
from opsctl.traffic.wire import ErrorKind, Failed, Wire

TokenSource = Literal["usage", "chunks"]

# Finish reasons a healthy completion may end with; "abort" or a missing one is a failure.
SANE_FINISH_REASONS = frozenset({"stop", "length"})
# The tolerant rule's bound: tokens per (byte of streamed text + chunk).
MAX_TOKENS_PER_EVIDENCE = 4
# Streamed text kept per request (its bytes are still counted): nothing compares streamed text,
# so a long stream costs its line buffer, not its whole answer.
MAX_KEPT_TEXT_CHARS = 1 << 20


def parse_api(value: str) -> Api:
    if value == "completions":
        return "completions"
    if value == "chat":
        return "chat"
    raise UsageError(f"--api {value!r}: choose 'completions' or 'chat'",
                     hint="e.g. --api chat for /v1/chat/completions")


@dataclass(slots=True)
class RequestResult:
    """One generation request, successful or not. Times are seconds from the request start."""

    ok: bool
    error_kind: ErrorKind | None = None
    error: str | None = None
    status: int | None = None
    text: str = ""  # the answer (content); what evals score
    reasoning: str = ""  # the thinking (`reasoning_content`): evidence, never scored
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    token_source: TokenSource = "chunks"
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    content_chunks: int = 0
    itl_split: bool = False  # gaps split by the server's per-chunk token counts
    usage_note: str | None = None  # the server's usage disagreed with the stream (see above)
    started: float | None = None  # perf_counter() when the request's clock started (streams)

    @property
    def tpot_s(self) -> float | None:
        """(e2e - ttft) / (output_tokens - 1); not measurable with fewer than two text chunks
        (the whole answer arrived at once) or fewer than two tokens."""
        if self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2 or not self.itl_s:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def fail(self, kind: ErrorKind, message: str) -> RequestResult:
        self.ok = False
        self.error_kind = kind
        self.error = " ".join(message.split())  # one line, whatever the server sent
        return self


class TrafficClient(httpx.AsyncClient):
    """httpx for the control plane; `wire()` is the aiohttp session generation goes through.

    The session is made on first use, inside the event loop that uses it, and closed with the
    client. Every answer is read under opsctl's byte caps, each exchange within its timeout in
    total (capped_async_transport here, the wire's own reads there). Proxies from the environment
    are ignored: opsctl talks to a server it deployed or was given by URL, and a corporate proxy
    in between would distort every latency it measures.
    """

    def __init__(self, base_url: str, api_key: str | None, *, max_connections: int,
                 timeout_s: float) -> None:
        limits = httpx.Limits(max_connections=max_connections,
                              max_keepalive_connections=max_connections)
        super().__init__(
            base_url=base_url.rstrip("/"), headers={**IDENTITY, **auth_headers(api_key)},
            timeout=httpx.Timeout(timeout_s), trust_env=False,
            transport=capped_async_transport(limits),
        )
        self._wire_args = (base_url, api_key, max_connections)
        self._wire: Wire | None = None

    def wire(self) -> Wire:
        if self._wire is None:
            base_url, api_key, max_connections = self._wire_args
            self._wire = Wire(base_url, api_key, max_connections=max_connections)
        return self._wire

    async def _close_wire(self) -> None:
        if self._wire is not None:
            wire, self._wire = self._wire, None
            await wire.close()

    async def aclose(self) -> None:
        await self._close_wire()
        await super().aclose()

    async def __aexit__(self, exc_type: type[BaseException] | None = None,
                        exc_value: BaseException | None = None,
                        traceback: TracebackType | None = None) -> None:
        await self._close_wire()
        await super().__aexit__(exc_type, exc_value, traceback)


class ClientFactory(Protocol):
    """How smoke and bench get their client: `make_client`, or a stand-in in a test."""

    def __call__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        max_connections: int = ...,
        timeout_s: float = ...,
    ) -> TrafficClient: ...


def make_client(
    base_url: str, api_key: str | None, *, max_connections: int = 16, timeout_s: float = 60.0
) -> TrafficClient:
    """A client with enough pooled connections for the requested concurrency."""
    return TrafficClient(base_url, api_key, max_connections=max_connections, timeout_s=timeout_s)


def request_body(
    api: Api,
    model: str,
    prompt: str,
    *,
    max_tokens: int,
    stream: bool,
    temperature: float = 0.0,
    ignore_eos: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": stream,
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream:
        # Token counts come from the server's own usage chunk, not from counting chunks.
        body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        # sglang and vLLM extension: generate exactly max_tokens so lengths are fixed.
        body["ignore_eos"] = True
    return body


def endpoint(api: Api) -> str:
    """The OpenAI path that generates for this API."""
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


async def stream_generate(
    client: TrafficClient,
    api: Api,
    body: dict[str, Any],
    *,
    timeout_s: float,
) -> RequestResult:
    """Send one streaming request; time every text chunk; classify any failure."""
    result = RequestResult(ok=False)
    stream = _Stream(result, api, time.perf_counter())
    try:
        async with asyncio.timeout(timeout_s):
            await client.wire().stream(endpoint(api), body, stream)
    except TimeoutError:
        result.started = stream.start
        return result.fail("timeout", f"no complete response within {timeout_s:g}s")
    except Failed as exc:
        result.status, result.started = stream.status, stream.start
        return result.fail(exc.kind, exc.message)
    result.started = stream.start
    return stream.finish(body.get("max_tokens"))


class _Stream:
    """What a stream has delivered so far, and its verdict once it ends: the one state machine
    every transport feeds (an opsctl.traffic.wire.LineSink)."""

    def __init__(self, result: RequestResult, api: Api, start: float) -> None:
        self.result = result
        self.api = api
        self.start = start  # reset by the wire when the request's headers are written
        self.end: float | None = None  # [DONE] read, or the body closed
        self.status: int | None = None
        self.done = False
        self.parts: list[str] = []
        self.kept = 0  # characters in `parts`
        self.thoughts: list[str] = []  # the thinking (`reasoning_content`), kept apart
        self.kept_thinking = 0
        self.text_bytes = 0
        self.chunks = 0  # chunks that carried a choice, with or without text
        self.last_text_at: float | None = None
        self.count_at_last_text: int | None = None  # the server's running token count then
        self.usage_tokens: int | None = None

    def feed(self, lines: list[bytes], now: float) -> bool:
        """The lines one read completed; True at `data: [DONE]`. Raises Failed for a chunk that
        is not what the API defines, or that carries an error."""
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # comments, event names, blank separators
            data = line[5:].strip()
            if data == b"[DONE]":
                self.done, self.end = True, now
                return True
            try:
                piece = parse_piece(self.api, decode_json(data), stream=True)
            except Malformed as exc:
                raise Failed("bad_response", f"SSE chunk: {exc}") from None
            if piece.error is not None:
                raise Failed("stream_error", piece.error)
            self.add(piece, now)
        return False

    def closed(self, now: float) -> None:
        self.end = now

    def add(self, piece: Piece, now: float) -> None:
        result = self.result
        count = piece.usage.completion_tokens if piece.usage else None
        if piece.usage is not None and count is not None:
            self.usage_tokens = count
            result.prompt_tokens = piece.usage.prompt_tokens
        if piece.has_choice:
            self.chunks += 1
        generated = piece.text or piece.thinking
        if generated:
            if self.last_text_at is None:
                result.ttft_s = now - self.start
            else:
                gap = now - self.last_text_at
                carried = (count - self.count_at_last_text
                           if count is not None and self.count_at_last_text is not None else 1)
                if carried > 1:
                    result.itl_split = True
                    result.itl_s.extend([gap / carried] * carried)
                else:
                    result.itl_s.append(gap)
            self.last_text_at = now
            self.count_at_last_text = count
            result.content_chunks += 1
            self.text_bytes += len(generated.encode())
            if self.kept < MAX_KEPT_TEXT_CHARS:
                self.parts.append(piece.text[:MAX_KEPT_TEXT_CHARS - self.kept])
                self.kept += len(self.parts[-1])
            if self.kept_thinking < MAX_KEPT_TEXT_CHARS:
                self.thoughts.append(piece.thinking[:MAX_KEPT_TEXT_CHARS - self.kept_thinking])
                self.kept_thinking += len(self.thoughts[-1])
        if piece.finish_reason:
            result.finish_reason = piece.finish_reason

    def finish(self, max_tokens: Any) -> RequestResult:
        result = self.result
        result.status = self.status
        result.text = "".join(self.parts)
        result.reasoning = "".join(self.thoughts)
        if not self.done and result.finish_reason is None:
            return result.fail("stream_cut",
                               "stream closed before any finish_reason (and without data: [DONE])")
        result.e2e_s = (self.end if self.end is not None else time.perf_counter()) - self.start
        result.output_tokens = result.content_chunks
        if self.usage_tokens is not None:
            note = implausible_usage(self.usage_tokens, max_tokens, self.text_bytes,
                                     self.chunks, result.content_chunks)
            if note is None:
                result.output_tokens, result.token_source = self.usage_tokens, "usage"
            else:
                result.usage_note = note + "; counted text chunks instead"
        if result.ttft_s is None:
            return result.fail("empty", "stream finished without any generated text")
        if result.finish_reason not in SANE_FINISH_REASONS:
            return result.fail("bad_response", f"finish_reason {result.finish_reason!r}")
        result.ok = True
        return result


def implausible_usage(tokens: int, max_tokens: Any, text_bytes: int, chunks: int,
                      text_chunks: int) -> str | None:
    """Why the server's completion_tokens cannot describe this answer (the tolerant rule), or
    None when it can. `chunks`/`text_chunks` are 0 for a whole (non-streamed) answer."""
    said = f"usage.completion_tokens={tokens}"
    if isinstance(max_tokens, int) and tokens > max_tokens:
        return f"{said} exceeds max_tokens={max_tokens}"
    if tokens < text_chunks:
        return f"{said} is fewer than the {text_chunks} chunks that carried text"
    if tokens > MAX_TOKENS_PER_EVIDENCE * (text_bytes + max(chunks, 1)):
        return (f"{said} is more than {MAX_TOKENS_PER_EVIDENCE} per byte and chunk of what "
                f"arrived ({text_bytes} bytes of text in {chunks} chunks)")
    return None


@dataclass(slots=True)
class _Clock:
    start: float


async def generate(
    client: TrafficClient,
    api: Api,
    body: dict[str, Any],
    *,
    timeout_s: float,
) -> RequestResult:
    """Send one non-streaming request and parse text, finish_reason and usage."""
    result = RequestResult(ok=False)
    clock = _Clock(time.perf_counter())
    try:
        async with asyncio.timeout(timeout_s):
            status, raw = await client.wire().post(endpoint(api), body, clock)
    except TimeoutError:
        return result.fail("timeout", f"no response within {timeout_s:g}s")
    except Failed as exc:
        return result.fail(exc.kind, exc.message)
    result.e2e_s = time.perf_counter() - clock.start
    result.status = status
    if status != 200:
        return result.fail("http_status", f"HTTP {status}: {body_message(raw)}")
    try:
        piece = parse_piece(api, decode_json(raw), stream=False)
    except Malformed as exc:
        return result.fail("bad_response", f"not a completion: {exc}")
    if piece.error is not None:
        return result.fail("stream_error", piece.error)
    result.text, result.reasoning = piece.text, piece.thinking
    result.finish_reason = piece.finish_reason
    if piece.usage is not None and piece.usage.completion_tokens is not None:
        result.output_tokens = piece.usage.completion_tokens
        result.prompt_tokens = piece.usage.prompt_tokens
        result.token_source = "usage"
        result.usage_note = implausible_usage(result.output_tokens, body.get("max_tokens"),
                                              len((result.reasoning + result.text).encode()), 0, 0)
    if not (result.reasoning + result.text).strip():
        return result.fail("empty", "empty generated text")
    if result.finish_reason not in SANE_FINISH_REASONS:
        return result.fail("bad_response", f"finish_reason {result.finish_reason!r}")
    result.ok = True
    return result
