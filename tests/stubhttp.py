"""A canned-answer HTTP server on loopback: a stand-in for Prometheus or the Docker engine API.

`StubServer(routes)` answers each request with the first route whose regex matches the path
(`re.search`, so a Docker API version prefix does not matter): a status, a content type and a
body, or `CLOSE` to drop the connection without an answer. Unmatched paths get 404. It never
listens beyond 127.0.0.1; use it as a context manager.
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CLOSE = "close"
Answer = tuple[int, str, bytes] | str


class StubServer:
    def __init__(self, routes: dict[str, Answer]) -> None:
        self.routes = [(re.compile(pattern), answer) for pattern, answer in routes.items()]
        self.paths: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                stub.paths.append(self.path)
                answer = next((a for p, a in stub.routes if p.search(self.path)),
                              (404, "application/json", b'{"message": "no such path"}'))
                if answer == CLOSE:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, content_type, body = answer  # type: ignore[misc]
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_HEAD = do_DELETE = do_GET  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def json_answer(status: int, text: str) -> Answer:
    return (status, "application/json", text.encode())


def docker_routes(extra: dict[str, Answer]) -> dict[str, Answer]:
    """`extra`, then just enough of the Docker engine API for `docker.from_env()` and `ping()`."""
    return {
        **extra,
        r"/_ping": (200, "text/plain", b"OK"),
        r"/version": json_answer(200, '{"ApiVersion": "1.43", "Version": "24.0.0", '
                                      '"MinAPIVersion": "1.12"}'),
    }
