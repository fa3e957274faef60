"""A small HTTP/1.1 server on asyncio streams: keep-alive, request bodies, chunked streaming.

Only what the simulator needs: one request at a time per connection (no pipelining), bodies by
Content-Length or chunked transfer coding, ``Expect: 100-continue``, and streamed responses sent
with chunked transfer coding like uvicorn's StreamingResponse. A stream can be cut on purpose
(the connection drops without the terminating chunk) to simulate a server dying mid-stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024

log = logging.getLogger("opsctl.sim")


class BadRequest(Exception):
    """The bytes on the wire are not an HTTP/1.x request we can serve (answered with 400)."""


class CutStream(Exception):
    """Raised by a streaming body to drop the connection without finishing the response."""


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str | None = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamingResponse:
    status: int
    chunks: AsyncIterator[bytes]
    content_type: str = "text/event-stream; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return Response(status=status, body=body, headers=dict(headers or {}))


Handler = Callable[[Request], Awaitable[Response | StreamingResponse]]


async def _read_head(reader: asyncio.StreamReader) -> list[bytes] | None:
    """Request line and header lines, or None on a clean EOF before a request starts."""
    lines: list[bytes] = []
    size = 0
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if not lines and not exc.partial:
                return None
            raise BadRequest("connection closed inside the request head") from None
        except asyncio.LimitOverrunError:
            raise BadRequest("request head line too long") from None
        size += len(line)
        if size > MAX_HEADER_BYTES:
            raise BadRequest("request head too large")
        stripped = line.rstrip(b"\r\n")
        if not stripped:
            if not lines:
                continue  # tolerate stray CRLF between requests (RFC 9112 2.2)
            return lines
        lines.append(stripped)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = (await reader.readuntil(b"\n")).strip()
        try:
            size = int(size_line.split(b";", 1)[0], 16)
        except ValueError:
            raise BadRequest("bad chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\n")).strip():
                pass  # trailers are ignored
            return b"".join(parts)
        total += size
        if total > MAX_BODY_BYTES:
            raise BadRequest("request body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _headers(lines: list[bytes]) -> dict[str, str]:
    """The header lines by lower-case name; a repeated header's values joined by commas."""
    headers: dict[str, str] = {}
    for raw in lines:
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep:
            raise BadRequest("malformed header line")
        key = name.strip().lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    return headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """The request's body, chunked or of its content-length, bounded by MAX_BODY_BYTES."""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return await _read_chunked(reader)
        length = int(headers.get("content-length", "0") or "0")
        if length < 0 or length > MAX_BODY_BYTES:
            raise BadRequest("bad content-length")
        return await reader.readexactly(length) if length else b""
    except ValueError:
        raise BadRequest("bad content-length") from None
    except asyncio.IncompleteReadError:
        raise BadRequest("connection closed inside the request body") from None


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> tuple[Request, bool] | None:
    """The next request and whether the connection may be kept alive after it."""
    head = await _read_head(reader)
    if head is None:
        return None
    try:
        method, target, version = head[0].decode("latin-1").split(" ")
    except ValueError:
        raise BadRequest("malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise BadRequest(f"unsupported protocol {version}")
    headers = _headers(head[1:])
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    body = await _read_body(reader, headers)
    path, _, query = target.partition("?")
    request = Request(method=method.upper(), path=path, query=query, headers=headers, body=body)
    return request, keep_alive


def _head_bytes(status: int, headers: Mapping[str, str]) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _base_headers(keep_alive: bool) -> dict[str, str]:
    headers = {"date": email.utils.formatdate(usegmt=True)}
    if not keep_alive:
        headers["connection"] = "close"
    return headers


async def write_response(
    writer: asyncio.StreamWriter,
    response: Response | StreamingResponse,
    keep_alive: bool,
) -> bool:
    """Send the response; False when the connection must close afterwards."""
    headers = _base_headers(keep_alive)
    if isinstance(response, Response):
        if response.content_type is not None:
            headers["content-type"] = response.content_type
        headers["content-length"] = str(len(response.body))
        headers.update(response.headers)
        writer.write(_head_bytes(response.status, headers) + response.body)
        await writer.drain()
        return keep_alive
    headers["content-type"] = response.content_type
    headers["transfer-encoding"] = "chunked"
    headers.update(response.headers)
    writer.write(_head_bytes(response.status, headers))
    chunks = response.chunks
    try:
        async for piece in chunks:
            if writer.transport.is_closing():
                raise ConnectionResetError("client went away")
            if piece:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
    except CutStream:
        # Drop the connection without the zero-length terminator: the client sees an
        # incomplete chunked body, as when a server process dies mid-stream.
        writer.transport.abort()
        return False
    finally:
        # Closing the generator runs its cleanup (abort accounting) right away, also on error.
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return keep_alive


class HttpServer:
    """Serves ``handler`` on asyncio streams and tracks in-flight requests for draining."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(
            self._serve_connection, host=host, port=port, backlog=1024, reuse_address=True
        )

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def drain(self, timeout: float) -> bool:
        """Wait until no request is in flight; True if that happened within ``timeout``."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close_connections(self) -> None:
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            await self._serve_requests(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except BadRequest as exc:
            await self._answer_bad_request(writer, str(exc))
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()

    async def _serve_requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        while True:
            parsed = await read_request(reader, writer)
            if parsed is None:
                return
            request, keep_alive = parsed
            self._begin()
            try:
                response = await self._call_handler(request)
                keep_open = await write_response(writer, response, keep_alive)
            finally:
                self._end()
            if not keep_open:
                return

    async def _call_handler(self, request: Request) -> Response | StreamingResponse:
        try:
            return await self._handler(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a handler bug must answer 500, not kill the connection loop
            log.exception("unhandled error in %s %s", request.method, request.path)
            return json_response(500, {"object": "error", "message": str(exc),
                                       "type": "InternalServerError", "param": None,
                                       "code": 500})

    async def _answer_bad_request(self, writer: asyncio.StreamWriter, message: str) -> None:
        with contextlib.suppress(ConnectionError):
            await write_response(writer, json_response(400, {"detail": message}), False)

    def _begin(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def _end(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()
