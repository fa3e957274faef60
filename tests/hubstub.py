"""A local stand-in for the Hugging Face hub, for `opsctl model fetch` against the real
huggingface_hub client (pointed here by its own HF_ENDPOINT setting): the hub cannot be reached
from this machine, so these are the few routes the client calls, answered the way the hub does.

  GET  /api/models/<owner>/<name>/revision/<rev>   the commit and the files (`siblings`, sizes)
  HEAD /<owner>/<name>/resolve/<commit>/<path>     the file's commit, ETag and size
  GET  /<owner>/<name>/resolve/<commit>/<path>     the file, with `Range: bytes=N-` resumed (206)

Errors carry the hub's `X-Error-Code` header (RepoNotFound, RevisionNotFound, GatedRepo), which
is what the client maps to RepositoryNotFoundError, RevisionNotFoundError and GatedRepoError.
A repository in `gated` answers 401 GatedRepo unless the request carries `Bearer <token>`.
A file in `cut` is cut off after three quarters of what is asked, as a dropped connection would,
the number of times `cut` gives (the client retries, with a Range once it has written a chunk,
and gives up after a few).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    folder: Path
    revisions: tuple[str, ...] = ("main",)

    @property
    def commit(self) -> str:
        return hashlib.sha1(str(self.folder).encode()).hexdigest()

    def files(self) -> dict[str, Path]:
        return {p.relative_to(self.folder).as_posix(): p for p in sorted(self.folder.rglob("*"))
                if p.is_file()}


@dataclass
class StubHub:
    repos: dict[str, Repo]
    gated: set[str] = field(default_factory=set)
    token: str = "hf_stub_token"
    cut: dict[str, int] = field(default_factory=dict)  # file -> how many more times to cut it
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    before_file: Callable[[str], None] | None = None  # called with a file's path before its GET
    # A broken or hostile hub: the listing it would send goes through this, and what it returns
    # is sent (bytes as they are, anything else as JSON).
    tamper: Callable[[dict[str, Any]], object] | None = None

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hub.serve(self, head=False)

            def do_HEAD(self) -> None:
                hub.serve(self, head=True)

        return Handler

    def serve(self, req: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlsplit(req.path).path)
        self.requests.append((req.command, path, req.headers.get("Range")))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            self._listing(req, f"{parts[2]}/{parts[3]}", "/".join(parts[5:]))
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._file(req, f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head)
        else:
            _error(req, 404, "EntryNotFound")

    def _repo(self, req: BaseHTTPRequestHandler, name: str) -> Repo | None:
        repo = self.repos.get(name)
        if repo is None:
            _error(req, 404, "RepoNotFound")
            return None
        if name in self.gated and req.headers.get("Authorization") != f"Bearer {self.token}":
            _error(req, 401, "GatedRepo")
            return None
        return repo

    def _listing(self, req: BaseHTTPRequestHandler, name: str, revision: str) -> None:
        repo = self._repo(req, name)
        if repo is None:
            return
        if revision not in (*repo.revisions, repo.commit):
            _error(req, 404, "RevisionNotFound")
            return
        siblings = [{"rfilename": n, "size": p.stat().st_size} for n, p in repo.files().items()]
        listing: dict[str, Any] = {"id": name, "modelId": name, "sha": repo.commit,
                                   "siblings": siblings}
        sent = listing if self.tamper is None else self.tamper(listing)
        body = sent if isinstance(sent, bytes) else json.dumps(sent).encode()
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    def _file(self, req: BaseHTTPRequestHandler, name: str, revision: str, path: str,
              head: bool) -> None:
        repo = self._repo(req, name)
        if repo is None:
            return
        file = repo.files().get(path)
        if revision != repo.commit or file is None:
            _error(req, 404, "EntryNotFound")
            return
        data = file.read_bytes()
        start = _range_start(req.headers.get("Range"))
        req.send_response(206 if start else 200)
        req.send_header("X-Repo-Commit", repo.commit)
        req.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        req.send_header("Content-Length", str(len(data) - start))
        if start:
            req.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        req.end_headers()
        if head:
            return
        if self.before_file is not None:
            self.before_file(path)
        body = data[start:]
        if self.cut.get(path, 0) > 0:
            self.cut[path] -= 1
            req.wfile.write(body[: len(body) * 3 // 4])
            req.wfile.flush()
            req.close_connection = True
            req.connection.shutdown(2)  # a dropped connection mid-file
            return
        req.wfile.write(body)

    @contextmanager
    def running(self) -> Iterator[str]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_port}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


def _range_start(header: str | None) -> int:
    if not header or not header.startswith("bytes="):
        return 0
    return int(header[len("bytes="):].split("-", 1)[0] or 0)


def _error(req: BaseHTTPRequestHandler, status: int, code: str) -> None:
    body = json.dumps({"error": code}).encode()
    req.send_response(status)
    req.send_header("X-Error-Code", code)
    req.send_header("Content-Type", "application/json")
    req.send_header("Content-Length", str(len(body)))
    req.end_headers()
    req.wfile.write(body)
