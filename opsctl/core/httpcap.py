"""Byte caps on every HTTP answer opsctl reads, so a server cannot make opsctl's memory grow.

A server that streams an endless /v1/models, a gigabyte error page or an SSE line that never
ends gets cut at a fixed size, and the error names the cap. Time is bounded elsewhere (each
caller's timeout); these caps bound memory whatever the time.

- `MAX_BODY_BYTES` (8 MiB): one whole answer (/v1/models, /model_info, /server_info, /metrics,
  a non-streamed completion, an error page). A real /server_info is tens of KB.
- `MAX_STREAM_BYTES` (64 MiB): one SSE stream in total. sglang's chunk is a few hundred bytes,
  so even 32k streamed tokens stay near 10 MiB.
- `MAX_SSE_LINE_BYTES` (1 MiB): one SSE line.

The clients opsctl builds put `CappedAsyncTransport`/`CappedTransport` under httpx, so any read
through them (`client.get(...)`, `response.aread()`) is capped; `SseLines` splits and caps the
lines of a stream whatever transport read it (the traffic room's generation path is aiohttp,
which applies `cap_for` and `exceeds` itself), and `read_capped` adds a total deadline for
synchronous probes. Clients ask for an uncompressed answer (`IDENTITY`), so the cap counts what
is held in memory; the httpx transports refuse an encoded answer, which httpx would decode whole
past the cap (aiohttp decodes incrementally, under the wire's caps).

Time: httpx's timeouts bound each read, so a server that sends one header line a second holds a
request for as long as it likes. `DeadlineTransport`/`DeadlineAsyncTransport` (put above the
caps by every client factory here: `capped_client`, `capped_async_transport`) bound the whole
exchange, connect + headers + body, by the request's timeout (the largest of its phases, so
`timeout=10` is 10 s in all); the body's reads count against the same deadline. Past it the
request fails with `httpx.ReadTimeout`, which every caller already treats as "no answer in time".
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import httpx

from opsctl.core.clock import SYSTEM_CLOCK, Clock
from opsctl.core.errors import UsageError
from opsctl.core.redact import redact_userinfo, remember_url

MAX_BODY_BYTES = 8 << 20
MAX_STREAM_BYTES = 64 << 20
MAX_SSE_LINE_BYTES = 1 << 20
IDENTITY = {"Accept-Encoding": "identity"}


def mib(size: int) -> str:
    return f"{size / (1 << 20):g} MiB"


class BodyTooLarge(httpx.TransportError):
    """The server sent more than a cap allows; the message names the cap."""


def cap_for(headers: Mapping[str, str]) -> int:
    """An SSE stream may run longer than a whole answer; everything else gets the body cap."""
    streaming = headers.get("content-type", "").startswith("text/event-stream")
    return MAX_STREAM_BYTES if streaming else MAX_BODY_BYTES


def exceeds(method: str, path: str, cap: int) -> str:
    """The one-line reason of an answer cut at `cap`."""
    return f"{method} {path}: the answer exceeds the {mib(cap)} cap"


def _too_large(request: httpx.Request, cap: int) -> BodyTooLarge:
    return BodyTooLarge(exceeds(request.method, request.url.path, cap), request=request)


def _refused(request: httpx.Request, headers: Mapping[str, str]) -> httpx.RequestError | None:
    """Why an answer is refused before its body is read: a declared length over the cap, or
    a content encoding opsctl did not ask for (httpx would decode it whole, past the cap: a
    few MiB of gzip are gigabytes)."""
    cap = cap_for(headers)
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > cap:
        return _too_large(request, cap)
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", ""):
        return httpx.DecodingError(
            f"{request.method} {request.url.path}: the answer is {encoding[:40]!r}-encoded, "
            "though opsctl asked for identity (decoded, it would escape the byte cap)",
            request=request)
    return None


class _CappedAsyncStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, request: httpx.Request, cap: int) -> None:
        self._inner, self._request, self._cap = inner, request, cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                raise _too_large(self._request, self._cap)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, request: httpx.Request, cap: int) -> None:
        self._inner, self._request, self._cap = inner, request, cap

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                raise _too_large(self._request, self._cap)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class CappedAsyncTransport(httpx.AsyncBaseTransport):
    """Wraps a transport so no response body read through it exceeds its cap."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if (refused := _refused(request, response.headers)) is not None:
            await response.aclose()
            raise refused
        inner = response.stream
        if isinstance(inner, httpx.AsyncByteStream):
            response.stream = _CappedAsyncStream(inner, request, cap_for(response.headers))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx.BaseTransport):
    """The synchronous twin of `CappedAsyncTransport` (readiness probes, info endpoints)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if (refused := _refused(request, response.headers)) is not None:
            response.close()
            raise refused
        inner = response.stream
        if isinstance(inner, httpx.SyncByteStream):
            response.stream = _CappedStream(inner, request, cap_for(response.headers))
        return response

    def close(self) -> None:
        self._inner.close()


def answer_json(response: httpx.Response) -> Any:
    """A server's answer decoded as JSON. ValueError when it is not JSON (or not UTF-8) and also
    when it nests too deeply: a RecursionError from a server's answer would read as the user's
    input nesting too deeply (exit 2, core.failures), when it is the server's fault."""
    try:
        return response.json()
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def checked_base_url(url: str, option: str) -> str:
    """`url` when it is an http(s) URL with a host; UsageError (exit 2) before any work starts.
    Its secrets (userinfo, a `?api_key=`) are masked in everything opsctl prints or writes from
    here on, in every form (`core.redact.remember_url`)."""
    remember_url(url)
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        raise UsageError(f"{option} {redact_userinfo(url)!r}: not a URL ({exc})",
                         hint="e.g. http://127.0.0.1:30000") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"{option} {redact_userinfo(url)!r}: not an http(s) URL with a host",
                         hint="e.g. http://127.0.0.1:30000")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:  # 99999 was a traceback
        raise UsageError(f"{option} {redact_userinfo(url)!r}: port {parsed.port} is not "
                         "between 1 and 65535", hint="e.g. http://127.0.0.1:30000")
    return url


def exchange_budget(request: httpx.Request) -> float | None:
    """The seconds the whole exchange of `request` may take: the largest phase of its timeout
    (httpx's public `timeout` extension, set from the client's or the call's `timeout=`)."""
    phases = request.extensions.get("timeout") or {}
    given = [float(v) for v in phases.values() if isinstance(v, int | float)]
    return max(given) if given else None


def _late(request: httpx.Request, budget: float) -> httpx.ReadTimeout:
    return httpx.ReadTimeout(f"{request.method} {request.url.path}: no whole answer within "
                             f"{budget:g}s", request=request)


Trace = Callable[[str, dict[str, Any]], Any]


class _Watchdog:
    """Ends one synchronous exchange at its deadline from a timer thread.

    A blocked socket read cannot be timed out from outside, but a socket shut down from another
    thread makes it return at once. The socket comes from httpcore's public `trace` extension
    (the network stream of `connection.connect_tcp`/`connection.start_tls`, and the stream's
    `get_extra_info("socket")`). `socket.socket.shutdown` is called on it directly, so a TLS
    socket's read sees end-of-file at the OS level instead of its SSL object vanishing mid-read.
    """

    def __init__(self, budget: float) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.fired = False
        self._timer = threading.Timer(budget, self._fire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def traced(self, inner: Trace | None) -> Trace:
        def trace(event: str, info: dict[str, Any]) -> Any:
            if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
                stream = info.get("return_value")
                sock = stream.get_extra_info("socket") if stream is not None else None
                if isinstance(sock, socket.socket):
                    with self._lock:
                        self._sock = sock
                    if self.fired:  # the deadline passed while connecting
                        self._shut(sock)
            return inner(event, info) if inner is not None else None
        return trace

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sock = self._sock
        if sock is not None:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # closed already: the exchange is over
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _DeadlineStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, request: httpx.Request, budget: float,
                 watchdog: _Watchdog) -> None:
        self._inner, self._request, self._budget, self._watchdog = inner, request, budget, watchdog

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._inner:
                if self._watchdog.fired:
                    raise _late(self._request, self._budget)
                yield chunk
        except httpx.TransportError:
            if self._watchdog.fired:
                raise _late(self._request, self._budget) from None
            raise

    def close(self) -> None:
        self._watchdog.cancel()
        self._inner.close()


class DeadlineTransport(httpx.BaseTransport):
    """Wraps a transport so each request's whole exchange (connect, headers, body) ends within
    its timeout. Each request goes on a fresh connection (`Connection: close`): the watchdog can
    only end a read on a socket it was shown, and a pooled connection's socket is not reachable
    through httpx's public API. Control-plane requests are a few a second; that costs nothing."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        budget = exchange_budget(request)
        if budget is None:
            return self._inner.handle_request(request)
        watchdog = _Watchdog(budget)
        request.headers["Connection"] = "close"
        request.extensions = {**request.extensions,
                              "trace": watchdog.traced(request.extensions.get("trace"))}
        watchdog.start()
        try:
            response = self._inner.handle_request(request)
        except httpx.TransportError:
            watchdog.cancel()
            if watchdog.fired:
                raise _late(request, budget) from None
            raise
        except BaseException:
            watchdog.cancel()
            raise
        if isinstance(response.stream, httpx.SyncByteStream):
            response.stream = _DeadlineStream(response.stream, request, budget, watchdog)
        else:
            watchdog.cancel()
        return response

    def close(self) -> None:
        self._inner.close()


class _DeadlineAsyncStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, request: httpx.Request, budget: float,
                 deadline: float) -> None:
        self._inner, self._request, self._budget, self._deadline = inner, request, budget, deadline

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self._inner)
        while True:
            try:  # each read under the one deadline; never a `yield` inside the timeout
                async with asyncio.timeout_at(self._deadline):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise _late(self._request, self._budget) from None
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class DeadlineAsyncTransport(httpx.AsyncBaseTransport):
    """The asyncio twin of `DeadlineTransport`: the exchange runs under `asyncio.timeout_at`,
    whose cancellation httpcore handles (the connection is dropped, never reused half-read)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        budget = exchange_budget(request)
        if budget is None:
            return await self._inner.handle_async_request(request)
        deadline = asyncio.get_running_loop().time() + budget
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._inner.handle_async_request(request)
        except TimeoutError:
            raise _late(request, budget) from None
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = _DeadlineAsyncStream(response.stream, request, budget, deadline)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def capped_transport() -> httpx.BaseTransport:
    """The transport under every synchronous client: whole-exchange deadline over the byte caps,
    proxies from the environment ignored."""
    return DeadlineTransport(CappedTransport(httpx.HTTPTransport(trust_env=False)))


def capped_async_transport(limits: httpx.Limits | None = None) -> httpx.AsyncBaseTransport:
    """The transport under every asyncio client (the traffic room's control calls, the metrics
    sampler): the same deadline and caps."""
    inner = (httpx.AsyncHTTPTransport(trust_env=False) if limits is None
             else httpx.AsyncHTTPTransport(trust_env=False, limits=limits))
    return DeadlineAsyncTransport(CappedAsyncTransport(inner))


def capped_client(*, headers: dict[str, str] | None = None, timeout_s: float = 10.0,
                  base_url: str = "") -> httpx.Client:
    """A synchronous client whose every answer is capped and whose every exchange ends within
    its timeout; proxies from the environment ignored."""
    return httpx.Client(base_url=base_url, headers={**IDENTITY, **(headers or {})},
                        timeout=httpx.Timeout(timeout_s), transport=capped_transport(),
                        trust_env=False)


class SseLines:
    """The lines of an SSE body (without their ending) as its bytes arrive, none longer than
    `cap` bytes: `feed` returns the lines a chunk completed, `end` the unterminated last one.

    SSE allows `\r\n`, `\r` and `\n` endings; `bytes.splitlines` splits on exactly those three,
    in C. A `\r` at the very end of a chunk may be the first half of a `\r\n` split across
    reads, so that line waits for the next chunk. Lines are only measured when the chunk could
    hold one over the cap, so a stream of small events pays nothing for the check.
    """

    __slots__ = ("_cap", "_pending")

    def __init__(self, cap: int = MAX_SSE_LINE_BYTES) -> None:
        self._cap = cap
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk if self._pending else chunk
        lines = data.splitlines(keepends=True)
        self._pending = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        if len(data) > self._cap and (len(self._pending) > self._cap
                                      or any(len(line) > self._cap + 2 for line in lines)):
            raise BodyTooLarge(f"an SSE line exceeds the {mib(self._cap)} cap")
        return [line.rstrip(b"\r\n") for line in lines]

    def end(self) -> list[bytes]:
        last, self._pending = self._pending.rstrip(b"\r\n"), b""
        return [last] if last else []


def read_capped(response: httpx.Response, *, cap: int = MAX_BODY_BYTES, timeout_s: float,
                clock: Clock = SYSTEM_CLOCK) -> bytes:
    """A streamed response's whole body, within `cap` bytes and `timeout_s` seconds in total.

    httpx's own timeouts bound each read, not the sum: a server that drips one byte every few
    seconds would otherwise hold a probe for hours.
    """
    deadline = clock.monotonic() + timeout_s
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > cap:
            raise _too_large(response.request, cap)
        if clock.monotonic() > deadline:
            raise httpx.ReadTimeout(f"no whole answer within {timeout_s:g}s",
                                    request=response.request)
    return bytes(body)
