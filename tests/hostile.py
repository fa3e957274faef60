"""A hostile OpenAI-compatible server on loopback, for the tests of what opsctl does with it.

`HostileServer(mode, ...)` listens on 127.0.0.1 (a free port) in a background thread and
answers every request according to `mode` (see `MODES`): endless bodies, SSE lines without
an end, connections closed without an answer, slow drips, malformed `choices`/`usage`,
impossible usage counts, streams without `data: [DONE]`, one chunk for a whole answer,
non-UTF-8 bytes, invalid JSON, HTML error pages, a key it demands or echoes back.

Everything is bounded: an "endless" answer stops after `max_seconds` or `max_bytes`, or as soon
as the client goes away; the server serves at most `max_requests` requests; `stop()` (or the
context manager) closes it. It never listens beyond loopback. `requests` records what was asked
(path, whether streamed) so a test can wait until a request is in flight.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MODEL = "hostile-model"
WORDS = "one two three four five"
HTML_502 = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1>" \
    b"<hr><center>nginx</center></body></html>\n"

# Chunks whose JSON is not what the OpenAI API defines (sent as a stream's first data line and
# as a whole completion); each must fail the request with a one-line reason.
MALFORMED: dict[str, Any] = {
    "choices_string": {"choices": "oops"},
    "choices_numbers": {"choices": [1, 2]},
    "choice_text_number": {"choices": [{"index": 0, "text": 5, "finish_reason": None}]},
    "finish_reason_list": {"choices": [{"index": 0, "text": "a", "finish_reason": ["stop"]}]},
    "delta_string": {"choices": [{"index": 0, "delta": "hi", "message": "hi"}]},
    "payload_list": [1, 2, 3],
    "payload_null": None,
    "usage_string": {"choices": [{"index": 0, "text": "a", "finish_reason": "stop"}],
                     "usage": "many"},
    "usage_tokens_string": {"choices": [{"index": 0, "text": "a", "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 3, "completion_tokens": "7"}},
    "usage_tokens_float": {"choices": [{"index": 0, "text": "a", "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 1.5}},
    "usage_tokens_negative": {"choices": [{"index": 0, "text": "a", "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": 3, "completion_tokens": -5}},
    "usage_tokens_bool": {"choices": [{"index": 0, "text": "a", "finish_reason": "stop"}],
                          "usage": {"prompt_tokens": True, "completion_tokens": 1}},
}

MODES = (
    "ok",               # a well-behaved server (sglang-like: /health_generate, /model_info)
    "endless_models",   # GET /v1/models streams forever
    "endless_body",     # a non-streamed completion's body never ends
    "endless_sse_line",  # a stream's data line never ends (no newline)
    "close",            # generation requests: the connection closes without any answer
    "close_models",     # GET /v1/models: the connection closes without any answer
    "slow_drip",        # a stream sends one chunk every drip_s seconds, never finishing
    "hang",             # generation requests are accepted and never answered
    "malformed",        # the chunk/completion named by `malformed` (see MALFORMED)
    "inflated_usage",   # usage says `usage_tokens` for 3 chunks of a few words
    "no_done",          # ends cleanly after a finish_reason chunk, without data: [DONE]
    "cut",              # stream closes cleanly before any finish_reason
    "cut_unclean",      # stream breaks off mid-body (no chunked terminator) before any finish
    "one_chunk",        # the whole answer in one chunk (finish_reason included)
    "multi_token",      # 4 tokens per chunk, with a cumulative usage count in every chunk
    "non_utf8",         # bytes that are not UTF-8 in the SSE data and the completion body
    "invalid_json",     # data lines / bodies that are not JSON
    "deep_json",        # JSON nested far deeper than any parser's recursion limit
    "auth",             # 401 unless `Authorization: Bearer <key>` (like sglang: /health* open)
    "echo_key",         # the bearer token comes back as the model id and in generated text
    "echo_auth",        # the whole Authorization header (`Basic <base64>`) comes back, unchecked
    "echo_token",       # its credential alone (`Basic ` dropped) comes back, in /model_info
                        # too, and a /server_info holding it, a key of its own and userinfo
    "redirect",         # generation requests get 307 to `redirect_to` (another host), the rest OK
    "html_502",         # every /v1 path answers 502 with nginx's HTML page
    "markup",           # model id and error text full of rich markup
    "empty_models",     # /v1/models lists nothing
)


# What mode "echo_token" answers at /server_info besides the echoed credential: secrets a server
# knows and opsctl was never given.
FOREIGN_SERVER_INFO = {"version": "0.5.23", "api_key": "server-own-key-31337",
                       "dist_init_addr": "tcp://root:server-pw-31337@10.0.0.1:5000"}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    hostile: HostileServer


class HostileServer:
    def __init__(self, mode: str, *, key: str = "sk-hostile-sentinel-key-4242",
                 malformed: str = "choices_string", usage_tokens: int = 1000,
                 drip_s: float = 0.2, max_seconds: float = 20.0, max_bytes: int = 256 << 20,
                 max_requests: int = 500, hang_after: int | None = None,
                 sglang: bool = False, redirect_to: str = "") -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} not in {MODES}")
        self.mode, self.key, self.malformed = mode, key, malformed
        self.usage_tokens, self.drip_s = usage_tokens, drip_s
        # Generation requests after this many hang (accepted, never answered).
        self.hang_after = hang_after
        # Answer sglang's own endpoints (/health_generate, /model_info); else 404 like vLLM & co.
        self.sglang = sglang
        self.redirect_to = redirect_to  # mode "redirect": where generation requests are sent
        self.max_seconds, self.max_bytes, self.max_requests = max_seconds, max_bytes, max_requests
        self.requests: list[Request] = []
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.hostile = self
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )
        self._thread.start()

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        tally = os.environ.get("OPSCTL_HOSTILE_TALLY")  # a JSONL file: what each server served
        if tally:
            with open(tally, "a") as handle:
                handle.write(json.dumps({"mode": self.mode, "malformed": self.malformed,
                                         "paths": [r.path for r in self.requests],
                                         "bytes_sent": self.bytes_sent}) + "\n")

    def record(self, request: Request) -> bool:
        """Keep the request; False once `max_requests` were served (then it is refused)."""
        with self._lock:
            self.requests.append(request)
            return len(self.requests) <= self.max_requests

    def generation_requests(self) -> int:
        return sum(1 for r in self.requests if r.path.startswith("/v1/") and "models" not in r.path)

    def wait_for(self, count: int, timeout_s: float = 20.0) -> bool:
        """Until `count` generation requests arrived (True) or the time is up (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.generation_requests() >= count:
                return True
            time.sleep(0.02)
        return False

    def over(self, started: float, sent: int) -> bool:
        return (self._stopping.is_set() or time.monotonic() - started > self.max_seconds
                or sent > self.max_bytes)


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        hostile = self.server.hostile
        while not hostile._stopping.is_set():  # keep-alive: several requests per connection
            try:
                request = self._read_request()
                if request is None or not hostile.record(request):
                    return
                if not self._answer(hostile, request):
                    return
            except OSError:
                return  # the client went away: that ends any endless answer

    def _read_request(self) -> Request | None:
        line = self.rfile.readline(65536)
        if not line.strip():
            return None
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (header := self.rfile.readline(65536)) not in (b"\r\n", b"\n", b""):
            name, _, value = header.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        return Request(method, path.split("?", 1)[0], headers, body)

    # --- answers ------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> bool:
        reason = {200: "OK", 401: "Unauthorized", 404: "Not Found", 502: "Bad Gateway"}
        head = (f"HTTP/1.1 {status} {reason.get(status, 'X')}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.wfile.write(head + body)
        self.wfile.flush()
        self.server.hostile.bytes_sent += len(body)
        return True

    def _send_redirect(self, location: str) -> bool:
        head = (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\n"
                "Content-Length: 0\r\n\r\n").encode()
        self.wfile.write(head)
        self.wfile.flush()
        return True

    def _send_json(self, payload: Any, status: int = 200) -> bool:
        return self._send(status, json.dumps(payload).encode())

    def _start_chunked(self, content_type: str) -> None:
        self.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n".encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
        self.server.hostile.bytes_sent += len(data)

    def _end_chunked(self) -> bool:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        return True

    def _endless(self, first: bytes, filler: bytes, content_type: str) -> bool:
        """`first`, then `filler` again and again until a bound; then the connection closes."""
        hostile = self.server.hostile
        started, sent = time.monotonic(), 0
        self._start_chunked(content_type)
        self._chunk(first)
        while not hostile.over(started, sent):
            self._chunk(filler)
            sent += len(filler)
        return False

    def _answer(self, hostile: HostileServer, request: Request) -> bool:
        mode, path = hostile.mode, request.path
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if mode == "echo_auth":  # what is echoed: the header as sent, any scheme
            bearer = request.headers.get("authorization", "")
        if mode == "echo_token":  # the credential without its scheme
            bearer = request.headers.get("authorization", "").partition(" ")[2]
            if path == "/server_info":
                return self._send_json({**FOREIGN_SERVER_INFO, "served_model_name": bearer})
            if path == "/model_info":  # verify prints it in its table
                return self._send_json({"model_path": "/models/hostile",
                                        "served_model_name": bearer, "tokenizer_path": None})
        checked = mode in ("auth", "echo_key") and not path.startswith("/health")
        if checked and bearer != hostile.key:
            return self._send_json({"error": {"message": "Invalid API key"}}, 401)
        if mode == "html_502" and path.startswith("/v1/"):
            return self._send(502, HTML_502, "text/html")
        if path in ("/health_generate", "/health") and hostile.sglang:
            return self._send(200, b"")
        if path == "/model_info" and hostile.sglang:
            return self._send_json({"model_path": "/models/hostile", "tokenizer_path": None})
        if path == "/v1/models":
            return self._models(hostile, bearer)
        if path in ("/v1/completions", "/v1/chat/completions"):
            return self._generate(hostile, request, bearer)
        return self._send_json({"error": {"message": "not found"}}, 404)

    def _models(self, hostile: HostileServer, bearer: str) -> bool:
        mode = hostile.mode
        if mode == "endless_models":
            return self._endless(b'{"object": "list", "data": [{"id": "', b" " * 65536,
                                 "application/json")
        if mode == "close_models":
            return False
        if mode == "empty_models":
            return self._send_json({"object": "list", "data": []})
        model = {"id": self._model_id(hostile, bearer)}
        return self._send_json({"object": "list", "data": [model]})

    def _model_id(self, hostile: HostileServer, bearer: str) -> str:
        if hostile.mode in ("echo_key", "echo_auth", "echo_token"):
            return f"model-of-{bearer}"
        if hostile.mode == "markup":
            return "[/x][bold red]model[/]"
        return MODEL

    def _generate(self, hostile: HostileServer, request: Request, bearer: str) -> bool:
        mode, chat = hostile.mode, request.path.endswith("chat/completions")
        stream = bool(request.body.get("stream"))
        if mode == "close":
            return False
        if mode == "redirect":
            return self._send_redirect(f"{hostile.redirect_to}{request.path}")
        late = hostile.hang_after is not None and hostile.generation_requests() > hostile.hang_after
        if mode == "hang" or late:
            started = time.monotonic()
            while not hostile.over(started, 0):
                time.sleep(0.05)
            return False
        if mode == "markup":
            return self._send_json({"error": {"message": "bad [/x] request [bold]here"}}, 400)
        if not stream:
            return self._whole(hostile, chat, bearer)
        if mode == "endless_sse_line":
            return self._endless(b"data: {\"choices\": [{\"text\": \"", b"a" * 65536,
                                 "text/event-stream")
        self._start_chunked("text/event-stream")
        for line in self._stream_lines(hostile, chat, bearer):
            self._chunk(line)
            if mode == "slow_drip":
                time.sleep(hostile.drip_s)
        if mode == "cut_unclean":
            return False
        return self._end_chunked()

    def _stream_lines(self, hostile: HostileServer, chat: bool, bearer: str) -> Iterator[bytes]:
        mode = hostile.mode
        if mode == "slow_drip":
            started = time.monotonic()
            while not hostile.over(started, 0):
                yield _sse(_chunk(chat, "tick ", None))
            return
        if mode == "malformed":
            yield _sse(MALFORMED[hostile.malformed])
            yield b"data: [DONE]\n\n"
            return
        if mode == "non_utf8":
            yield b'data: {"choices": [{"index": 0, "text": "\xff\xfe caf\xe9"}]}\n\n'
            return
        if mode == "invalid_json":
            yield b'data: {"choices": [{"text": "a", \n\n'
            return
        if mode == "deep_json":
            yield b"data: " + b"[" * 200_000 + b"]" * 200_000 + b"\n\n"
            return
        words = WORDS.split()
        text = f"echo {bearer} " if mode in ("echo_key", "echo_auth") else ""
        if mode in ("one_chunk", "echo_key", "echo_auth"):
            yield _sse(_chunk(chat, text + WORDS, "stop"))
            yield _sse(_usage(len(words) * 2))
            yield b"data: [DONE]\n\n"
            return
        if mode == "multi_token":
            for index in range(4):
                finish = "stop" if index == 3 else None
                yield _sse({**_chunk(chat, "four tokens here ok ", finish),
                            "usage": {"prompt_tokens": 5, "completion_tokens": 4 * (index + 1)}})
            yield b"data: [DONE]\n\n"
            return
        chunks = [(w + " ", None) for w in words[:-1]] + [(words[-1], "stop")]
        if mode in ("cut", "cut_unclean"):
            chunks = [(w + " ", None) for w in words[:3]]
        if mode == "inflated_usage":
            chunks = [("one two ", None), ("three four ", None), ("five", "stop")]
        for word, finish in chunks:
            yield _sse(_chunk(chat, word, finish))
        if mode in ("cut", "cut_unclean", "no_done"):
            return
        tokens = hostile.usage_tokens if mode == "inflated_usage" else len(chunks)
        yield _sse(_usage(tokens))
        yield b"data: [DONE]\n\n"

    def _whole(self, hostile: HostileServer, chat: bool, bearer: str) -> bool:
        mode = hostile.mode
        if mode == "endless_body":
            return self._endless(b'{"choices": [{"text": "', b"a" * 65536, "application/json")
        if mode == "malformed":
            return self._send_json(MALFORMED[hostile.malformed])
        if mode == "non_utf8":
            return self._send(200, b'{"choices": [{"text": "\xff\xfe", "finish_reason": "stop"}]}')
        if mode == "invalid_json":
            return self._send(200, b'{"choices": [')
        if mode == "deep_json":
            return self._send(200, b"[" * 200_000 + b"]" * 200_000)
        text = f"echo {bearer} {WORDS}" if mode in ("echo_key", "echo_auth") else WORDS
        message: dict[str, Any] = ({"message": {"role": "assistant", "content": text}} if chat
                                   else {"text": text})
        tokens = hostile.usage_tokens if mode == "inflated_usage" else 5
        return self._send_json({"choices": [{"index": 0, **message, "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 4, "completion_tokens": tokens}})


def _chunk(chat: bool, text: str, finish: str | None) -> dict[str, Any]:
    choice: dict[str, Any] = ({"index": 0, "delta": {"content": text}} if chat
                              else {"index": 0, "text": text})
    return {"id": "x", "object": "chunk", "model": MODEL,
            "choices": [{**choice, "finish_reason": finish}]}


def _usage(completion_tokens: int) -> dict[str, Any]:
    return {"id": "x", "choices": [],
            "usage": {"prompt_tokens": 4, "completion_tokens": completion_tokens}}


def _sse(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def free_port() -> int:
    """A loopback port nothing listens on (for 'connection refused')."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
