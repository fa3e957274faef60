"""`opsctl metrics-proxy`: sglang's /metrics for a Prometheus on another machine, behind a
bearer token, while sglang's own port (API, admin endpoints) stays on 127.0.0.1.

sglang serves /metrics on its API port, unauthenticated even with --api-key (reference:
reliability-security.md section 1.6), and the pinned releases have no separate metrics
listener. So opsctl listens on its own address and forwards exactly one thing: `GET /metrics`,
with a valid `Authorization: Bearer <token>`, to the upstream's /metrics. Everything else gets
401 (no or wrong token, asked first so that nothing is learnt without one), 404 (another
path) or 405 (another method). The upstream answer is bounded in size (opsctl.core.httpcap's
body cap) and in total time; an upstream failure is a 502/504, never a traceback.

The token is read from a file or from an environment variable named on the command line,
never taken as an argument value (argv is visible to every user in `ps`), and never logged.
Over plain HTTP it crosses the network in clear: `--tls-cert/--tls-key` serve HTTPS.
"""

from __future__ import annotations

import hmac
import os
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from opsctl.core.errors import UsageError
from opsctl.core.httpcap import MAX_BODY_BYTES, BodyTooLarge, capped_client, mib, read_capped
from opsctl.observe.exporter import LISTEN_BACKLOG

if TYPE_CHECKING:
    from opsctl.config.profiles import Profile

DEFAULT_PORT = 9465
UPSTREAM_TIMEOUT_S = 8.0  # under Prometheus' default scrape_timeout of 10 s
CLIENT_TIMEOUT_S = 10.0  # a client that stalls its request is dropped
MIN_TOKEN_CHARS = 16
REALM = 'Bearer realm="opsctl-metrics"'
_TEXT = "text/plain; charset=utf-8"


def upstream_for(profile: Profile) -> str:
    """The profile's sglang, asked on loopback when it is published on every address."""
    container = profile.container
    host = container.publish_address
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{container.host_port}"


def read_token(token_file: Path | None, token_env: str | None,
               environ: Mapping[str, str] = os.environ) -> str:
    """The bearer token from exactly one of a file or a named environment variable."""
    if (token_file is None) == (token_env is None):
        raise UsageError("give exactly one of --token-file or --token-env",
                         hint="the token itself is never an argument: `ps` shows arguments")
    if token_file is not None:
        try:
            if token_file.stat().st_mode & 0o004:
                raise UsageError(f"token file {token_file} is readable by every user",
                                 hint=f"chmod 600 {token_file}")
            token = token_file.read_text().strip()
        except OSError as exc:
            raise UsageError(f"cannot read token file {token_file}: {exc.strerror}",
                             hint="create it with e.g. `openssl rand -hex 32 > FILE`") from None
        where = f"token file {token_file}"
    else:
        token = environ.get(str(token_env), "").strip()
        where = f"environment variable {token_env}"
    if len(token) < MIN_TOKEN_CHARS:
        raise UsageError(f"the token in {where} is empty or shorter than {MIN_TOKEN_CHARS} "
                         "characters", hint="use e.g. `openssl rand -hex 32`")
    return token


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = _TEXT
    headers: tuple[tuple[str, str], ...] = ()


def authorized(header: str | None, token: str) -> bool:
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(),
                                                              token.encode())


def fetch_metrics(client: httpx.Client, upstream: str, accept: str | None) -> Reply:
    """The upstream's /metrics, or a short 502/504 that says what went wrong."""
    headers = {"Accept": accept} if accept else {}
    try:
        with client.stream("GET", f"{upstream.rstrip('/')}/metrics", headers=headers) as response:
            if response.status_code != 200:
                return Reply(502, f"upstream /metrics answered {response.status_code}\n".encode())
            body = read_capped(response, cap=MAX_BODY_BYTES, timeout_s=UPSTREAM_TIMEOUT_S)
            return Reply(200, body, response.headers.get("content-type", _TEXT))
    except httpx.TimeoutException:
        return Reply(504, f"upstream /metrics took more than {UPSTREAM_TIMEOUT_S:g}s\n".encode())
    except BodyTooLarge:
        return Reply(502, f"upstream /metrics is larger than {mib(MAX_BODY_BYTES)}\n".encode())
    except httpx.HTTPError as exc:
        return Reply(502, f"upstream /metrics unreachable ({type(exc).__name__})\n".encode())


Fetch = Callable[[str | None], Reply]


def handle(method: str, path: str, headers: Mapping[str, str], token: str, fetch: Fetch) -> Reply:
    """One request: the token first, then the path, then the method."""
    if not authorized(headers.get("Authorization"), token):
        return Reply(401, b"unauthorized\n", headers=(("WWW-Authenticate", REALM),))
    if urlsplit(path).path != "/metrics":
        return Reply(404, b"only /metrics is served here\n")
    if method != "GET":
        return Reply(405, b"only GET\n", headers=(("Allow", "GET"),))
    return fetch(headers.get("Accept"))


def make_server(address: str, port: int, respond: Callable[[str, str, Any], Reply],
                tls: tuple[Path, Path] | None = None) -> ThreadingHTTPServer:
    """A threaded HTTP(S) server that answers every request with `respond(method, path,
    headers)`."""

    class Handler(BaseHTTPRequestHandler):
        timeout = CLIENT_TIMEOUT_S
        server_version = "opsctl-metrics-proxy"
        sys_version = ""

        def setup(self) -> None:
            super().setup()
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()  # here, in this request's thread, with a timeout

        def _answer(self) -> None:
            reply = respond(self.command, self.path, self.headers)
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            for name, value in reply.headers:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.body)

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _answer

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: a scrape every few seconds is not news (and headers are never logged)."""

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = LISTEN_BACKLOG

        def handle_error(self, request: Any, client_address: Any) -> None:
            """A client that hangs up or fails its TLS handshake is not the server's problem."""

    try:
        server = Server((address, port), Handler)
    except OSError as exc:
        raise UsageError(f"cannot listen on {address}:{port}: {exc.strerror}",
                         hint="pick another --port or stop what uses it") from None
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(str(tls[0]), str(tls[1]))
        except (OSError, ssl.SSLError) as exc:
            server.server_close()
            raise UsageError(f"cannot load --tls-cert/--tls-key: {exc}",
                             hint="a PEM certificate and its private key") from None
        server.socket = context.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
    return server


def start(upstream: str, token: str, address: str, port: int,
          tls: tuple[Path, Path] | None = None) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Serve from a background thread; `.shutdown()` on the server stops it."""
    client = capped_client(timeout_s=UPSTREAM_TIMEOUT_S)

    def respond(method: str, path: str, headers: Any) -> Reply:
        return handle(method, path, headers, token,
                      lambda accept: fetch_metrics(client, upstream, accept))

    server = make_server(address, port, respond, tls)
    thread = threading.Thread(target=server.serve_forever, name="metrics-proxy", daemon=True)
    thread.start()
    return server, thread
