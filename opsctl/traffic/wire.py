"""Generation requests on the wire: aiohttp, whose HTTP parser is C, under opsctl's byte caps.

Smoke and bench generate through here; the control plane (/v1/models, /model_info, readiness,
/metrics) stays on httpx (opsctl.traffic.client.TrafficClient). A pure-Python HTTP stack spent
about half of the client's CPU per streamed token; this path leaves each chunk one C parse, one
`bytes.splitlines` (opsctl.core.httpcap.SseLines) and the stream's own bookkeeping.

What it guarantees, whatever the server does:
- every body is read under the caps of opsctl.core.httpcap (`cap_for`: a whole answer 8 MiB,
  an SSE stream 64 MiB, an SSE line 1 MiB); a declared Content-Length over the cap is refused
  before any byte is read;
- every failure is a `Failed` with an error kind and a one-line message, never an aiohttp
  exception: connect, stream_cut (with "without sending a response" when no status line came),
  too_large, bad_response, http_status (with the error body's message);
- the clock of a request (`Clocked.start`) is set by aiohttp's `on_request_headers_sent` trace,
  right before the request is written to a connection already obtained, so connecting and
  waiting for a pooled connection are not read as server latency;
- a stream that ended at `data: [DONE]` is drained briefly, so its keep-alive connection is
  reused instead of being closed with a chunked terminator still unread.

Credentials in the base URL become a Basic Authorization header (as httpx does) and never
appear in a message; proxies from the environment are ignored (`trust_env=False`).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Literal, Protocol

import aiohttp
from yarl import URL

from opsctl.core.httpcap import (
    IDENTITY,
    MAX_BODY_BYTES,
    BodyTooLarge,
    SseLines,
    cap_for,
    exceeds,
)
from opsctl.core.redact import auth_headers, redact_userinfo
from opsctl.traffic.payload import body_message

ErrorKind = Literal[
    "connect", "timeout", "http_status", "stream_cut", "stream_error", "bad_response", "empty",
    "too_large", "deadline",
]

# After `data: [DONE]`, how long and how much more the stream may take to end (its chunked
# terminator) before the connection is closed instead of reused; never a failure.
DRAIN_S = 1.0
DRAIN_BYTES = 64 << 10
_JSON = {"Content-Type": "application/json"}


class Failed(Exception):
    """A request failed; `kind` and the one-line `message` go to its RequestResult."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


class Clocked(Protocol):
    """What a request's timing is kept in: `start` is set when its headers are written."""

    start: float


class LineSink(Clocked, Protocol):
    """Where a stream's lines go (opsctl.traffic.client's one stream state machine)."""

    status: int | None

    def feed(self, lines: list[bytes], now: float) -> bool:
        """Take the lines one read completed, all read at `now`; True once the stream is done.
        Raises Failed for a line that fails the request."""
        ...

    def closed(self, now: float) -> None:
        """The body ended (the connection closed cleanly) at `now`."""
        ...


async def _headers_sent(_session: aiohttp.ClientSession, context: Any, _params: Any) -> None:
    clocked = context.trace_request_ctx
    if clocked is not None:
        clocked.start = time.perf_counter()


def _trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(_headers_sent)
    return trace


class Wire:
    """One aiohttp session for a client's generation requests; create it inside the event loop
    that will use it, and `close` it there."""

    def __init__(self, base_url: str, api_key: str | None, *, max_connections: int) -> None:
        root = URL(base_url.rstrip("/"))
        headers = {**IDENTITY, **auth_headers(api_key)}
        if root.user is not None:
            login = aiohttp.BasicAuth(root.user, root.password or "")
            headers["Authorization"] = login.encode()
        self._root = str(root.with_user(None))
        self._urls: dict[str, URL] = {}
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections, limit_per_host=0),
            headers=headers, timeout=aiohttp.ClientTimeout(total=None), trust_env=False,
            trace_configs=[_trace()],
        )

    def _url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self._root + path)
        return url

    async def close(self) -> None:
        await self._session.close()

    async def _open(self, path: str, body: dict[str, Any], clocked: Clocked
                    ) -> aiohttp.ClientResponse:
        try:
            # Never follow a redirect: aiohttp would send the prompt and the credentials to
            # whatever host the Location names (the control plane refuses them too).
            response = await self._session.post(
                self._url(path), data=json.dumps(body).encode(), headers=_JSON,
                trace_request_ctx=clocked, allow_redirects=False)
        except aiohttp.ClientError as exc:
            raise _failure(exc, answered=False, streaming=False) from None
        if 300 <= response.status < 400:
            location = redact_userinfo(response.headers.get("Location", "?"))[:200]
            response.close()
            raise Failed("http_status", f"HTTP {response.status}: redirect to {location!r} not "
                         "followed (generation requests stay on --base-url)")
        return response

    async def stream(self, path: str, body: dict[str, Any], sink: LineSink) -> None:
        """POST `body` and feed the SSE lines of the answer to `sink` until it is done."""
        response = await self._open(path, body, sink)
        sink.status = response.status
        try:
            if response.status != 200:
                raw = await _read(response, path)
                raise Failed("http_status", f"HTTP {response.status}: {body_message(raw)}")
            cap = _checked_cap(response, path)
            lines = SseLines()
            content, clock = response.content, time.perf_counter
            seen = 0
            while chunk := await content.readany():
                now = clock()
                seen += len(chunk)
                if seen > cap:
                    raise Failed("too_large", exceeds("POST", path, cap))
                if sink.feed(lines.feed(chunk), now):
                    await _drain(response)
                    return
            now = clock()
            sink.feed(lines.end(), now)
            sink.closed(now)
        except BodyTooLarge as exc:
            response.close()
            raise Failed("too_large", str(exc)) from None
        except aiohttp.ClientError as exc:
            response.close()
            raise _failure(exc, answered=True, streaming=True) from None
        except BaseException:
            if not response.content.at_eof():
                response.close()  # a failed line, a timeout, a cancellation: never reuse it
            raise
        finally:
            response.release()

    async def post(self, path: str, body: dict[str, Any], clocked: Clocked) -> tuple[int, bytes]:
        """POST `body`; the status and the whole answer, read under the body cap."""
        response = await self._open(path, body, clocked)
        try:
            return response.status, await _read(response, path)
        except aiohttp.ClientError as exc:
            response.close()
            raise _failure(exc, answered=True, streaming=False) from None
        except BaseException:
            if not response.content.at_eof():
                response.close()
            raise
        finally:
            response.release()


def _checked_cap(response: aiohttp.ClientResponse, path: str) -> int:
    cap = cap_for(response.headers)
    if response.content_length is not None and response.content_length > cap:
        raise Failed("too_large", exceeds("POST", path, cap))
    return cap


async def _read(response: aiohttp.ClientResponse, path: str) -> bytes:
    cap = min(_checked_cap(response, path), MAX_BODY_BYTES)
    body = bytearray()
    while chunk := await response.content.readany():
        body += chunk
        if len(body) > cap:
            raise Failed("too_large", exceeds("POST", path, cap))
    return bytes(body)


async def _drain(response: aiohttp.ClientResponse) -> None:
    """Read what follows `[DONE]` (the chunked terminator) so the connection can be reused; a
    server that keeps sending gets its connection closed instead."""
    left = DRAIN_BYTES
    try:
        async with asyncio.timeout(DRAIN_S):
            while left > 0 and (chunk := await response.content.readany()):
                left -= len(chunk)
    except (TimeoutError, aiohttp.ClientError):
        pass
    if not response.content.at_eof():
        response.close()


def _failure(exc: aiohttp.ClientError, *, answered: bool, streaming: bool) -> Failed:
    """The one-line failure for an aiohttp exception."""
    text = redact_userinfo(" ".join(str(exc).split()))
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.InvalidURL):
        return Failed("connect", f"cannot connect: {text}")
    if isinstance(exc, aiohttp.ClientResponseError):
        return Failed("bad_response", f"not an HTTP answer: {type(exc).__name__}: {text}")
    if not answered:
        return Failed("stream_cut", "the server closed the connection without sending a "
                                    f"response ({type(exc).__name__}: {text})")
    what = "stream ended early" if streaming else "no whole answer"
    return Failed("stream_cut", f"{what}: {type(exc).__name__}: {text}")
