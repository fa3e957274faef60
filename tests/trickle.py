"""A server on loopback that answers so slowly that only a deadline on the whole exchange ends it.

`TrickleServer("headers")` sends a status line, then one header line a second and never the
blank line that ends the headers; `TrickleServer("body")` sends whole headers announcing a
large body, then one byte of it a second. Each read a client makes returns within a second, so
a per-read timeout never fires (issue 25: `up --timeout 10` waited past 90 s, `verify --timeout
10` 160 s). Everything is bounded: a connection is dropped after `max_seconds`, or as soon as
the client goes away or `stop()` runs. `connections` counts the connections it served.
"""

from __future__ import annotations

import socketserver
import threading
import time


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
    trickle: TrickleServer


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        trickle = self.server.trickle
        with trickle.lock:
            trickle.connections += 1
        while self.rfile.readline(65536) not in (b"\r\n", b"\n", b""):
            pass  # the request's headers (no request opsctl sends here has a body)
        if trickle.mode == "headers":
            head, drip = b"HTTP/1.1 200 OK\r\n", lambda n: f"X-Trickle-{n}: {n}\r\n".encode()
        else:
            head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 100000\r\n\r\n")
            drip = lambda n: b" "  # noqa: E731 - one byte of the announced body
        started = time.monotonic()
        try:
            self.wfile.write(head)
            self.wfile.flush()
            count = 0
            while not trickle.stopping.wait(trickle.interval_s):
                if time.monotonic() - started > trickle.max_seconds:
                    return
                count += 1
                self.wfile.write(drip(count))
                self.wfile.flush()
        except OSError:
            return  # the client went away


class TrickleServer:
    def __init__(self, mode: str = "headers", *, interval_s: float = 1.0,
                 max_seconds: float = 60.0) -> None:
        if mode not in ("headers", "body"):
            raise ValueError(f"mode {mode!r}: 'headers' or 'body'")
        self.mode, self.interval_s, self.max_seconds = mode, interval_s, max_seconds
        self.connections = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.trickle = self
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    def __enter__(self) -> TrickleServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
