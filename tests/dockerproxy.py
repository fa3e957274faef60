"""A Docker API proxy on a unix socket that injects daemon faults at a chosen API call.

`DockerProxy(faults)` listens on a fresh unix socket (`proxy.docker_host` is the DOCKER_HOST to
give opsctl) and forwards every request to the real daemon's socket, except those a `Fault`
matches by method and path (the `/v1.NN` prefix and the query ignored). What a fault does:

- `delay`: forward the request, hold the daemon's answer `seconds`, then send it (a slow daemon:
  the call has happened on the daemon while the client still waits);
- `stall`: hold the request `seconds` before forwarding it (the call reaches the daemon late);
- `blackhole`: take the request and never answer, nor forward it (a hung daemon);
- `drop`: close the connection without forwarding or answering (a daemon that died);
- `drop_response`: forward the request, let the daemon act on it, then close without answering
  (a daemon that died after acting, e.g. after creating the container);
- `down`: drop this request and every later one for `seconds` (the daemon is away, then back).

A fault applies to its `nth` matching request (1: the first) and the `times - 1` after it. Every
request is recorded in `seen` as (method, path, action). Each connection carries one request
(the proxy asks the daemon to close after answering), so matching is per request. Everything is
bounded: a held connection is let go after `max_seconds`, and `stop()` closes all.
"""

from __future__ import annotations

import re
import select
import socket
import socketserver
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

DAEMON_SOCKET = "/var/run/docker.sock"
ACTIONS = ("pass", "delay", "stall", "blackhole", "drop", "drop_response", "down")
_VERSION = re.compile(r"^/v1\.\d+(?=/)")
_HEAD_LIMIT = 256 * 1024


@dataclass
class Fault:
    method: str
    path: str  # a regex searched in the path, e.g. r"^/containers/create$"
    action: str
    seconds: float = 0.0  # delay, down
    nth: int = 1
    times: int = 1
    matched: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}; one of {ACTIONS}")

    def take(self, method: str, path: str) -> bool:
        if method != self.method or not re.search(self.path, path):
            return False
        self.matched += 1
        return self.nth <= self.matched < self.nth + self.times


class DockerProxy:
    def __init__(self, faults: list[Fault] | None = None, upstream: str = DAEMON_SOCKET,
                 max_seconds: float = 120.0) -> None:
        self.faults = list(faults or [])
        self.upstream = upstream
        self.max_seconds = max_seconds
        self.seen: list[tuple[str, str, str]] = []
        self._down_until = 0.0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._dir = Path(tempfile.mkdtemp(prefix="dproxy-", dir="/tmp"))  # short: sun_path limit
        self.path = self._dir / "docker.sock"
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        self._server = socketserver.ThreadingUnixStreamServer(str(self.path), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="docker-proxy",
                                        daemon=True)

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    def __enter__(self) -> DockerProxy:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)
        self._dir.rmdir()

    def add(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def calls(self, method: str, path: str) -> list[tuple[str, str, str]]:
        return [call for call in self.seen if call[0] == method and re.search(path, call[1])]

    # --- one connection, one request -------------------------------------------------------------

    def _decide(self, method: str, path: str) -> tuple[str, float]:
        with self._lock:
            if time.monotonic() < self._down_until:
                action, seconds = "down", 0.0
            else:
                fault = next((f for f in self.faults if f.take(method, path)), None)
                action, seconds = (fault.action, fault.seconds) if fault else ("pass", 0.0)
                if action == "down":
                    self._down_until = time.monotonic() + seconds
            self.seen.append((method, path, action))
            return action, seconds

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(self.max_seconds)
        head, body = _read_head(client)
        if head is None:
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, target = (request_line.split(" ") + ["", ""])[:2]
        path = _VERSION.sub("", urlsplit(target).path)
        action, seconds = self._decide(method, path)
        if action in {"drop", "down"}:
            return
        if action == "blackhole":
            self._hold(client)
            return
        if action == "stall":
            self._stopping.wait(seconds)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
            upstream.settimeout(self.max_seconds)
            upstream.connect(self.upstream)
            upstream.sendall(_one_request(head) + body)
            answer = self._relay(client, upstream, buffer=action in {"delay", "drop_response"})
        if action == "delay":
            self._stopping.wait(seconds)
            client.sendall(answer)

    def _relay(self, client: socket.socket, upstream: socket.socket, buffer: bool) -> bytes:
        """Pump both ways until the daemon closes; its answer is returned instead of sent when
        `buffer`."""
        kept = bytearray()
        deadline = time.monotonic() + self.max_seconds
        peers = [client, upstream]
        while time.monotonic() < deadline and not self._stopping.is_set():
            readable, _, _ = select.select(peers, [], [], 0.5)
            for sock in readable:
                data = sock.recv(65536)
                if sock is upstream:
                    if not data:
                        return bytes(kept)
                    if buffer:
                        kept += data
                    else:
                        client.sendall(data)
                elif data:
                    upstream.sendall(data)
                else:
                    peers = [upstream]  # the client finished sending (or went away)
        return bytes(kept)

    def _hold(self, client: socket.socket) -> None:
        """Keep the connection open without a word until the client leaves or time is up."""
        deadline = time.monotonic() + self.max_seconds
        while time.monotonic() < deadline and not self._stopping.is_set():
            readable, _, _ = select.select([client], [], [], 0.5)
            if readable and not client.recv(65536):
                return


def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = client.recv(65536)
        except OSError:
            return None, b""
        if not chunk or len(data) > _HEAD_LIMIT:
            return None, b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", body


def _one_request(head: bytes) -> bytes:
    """The request head with `Connection: close`, so the daemon closes after its answer."""
    lines = [line for line in head.rstrip(b"\r\n").split(b"\r\n")
             if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n"
