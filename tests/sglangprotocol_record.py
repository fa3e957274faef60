"""Record a running server's OpenAI answers as records the protocol checks read (stdlib only).

    python3 tests/sglangprotocol_record.py http://127.0.0.1:30000 MODEL OUT_DIR [API_KEY]

writes ``OUT_DIR/<name>.json`` = ``{"kind", "endpoint", "request", "status", "body"}`` for the
model list and card, completions and chat (greedy, non-streaming and streaming with the usage
chunk; ``stream`` records keep the raw SSE text), two refused requests, and ``/model_info`` and
``/server_info`` (kind ``info``: kept for comparison, not a protocol.py model). Put the directory
at ``tests/fixtures/real-sglang-<version>/`` and ``test_sim_protocol.py`` checks every record
against that version's own models. Runs on any Python 3.10+ with no packages (the device has no
network), so it can be copied next to a real server.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

TIMEOUT_S = 120


def _call(url: str, key: str | None, body: Any = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310
            return answer.status, answer.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


def exchanges(model: str) -> list[tuple[str, str, str, Any]]:
    """(name, kind, endpoint, request body or None for a GET)."""
    chat = {"model": model, "messages": [{"role": "user", "content": "Say hello."}],
            "temperature": 0, "max_tokens": 16}
    completion = {"model": model, "prompt": "The capital of France is", "temperature": 0,
                  "max_tokens": 16}
    usage = {"stream": True, "stream_options": {"include_usage": True}}
    return [
        ("v1-models", "response", "/v1/models", None),
        ("v1-model-card", "response", f"/v1/models/{model}", None),
        ("completion", "response", "/v1/completions", completion),
        ("completion-stream", "stream", "/v1/completions", {**completion, **usage}),
        ("chat", "response", "/v1/chat/completions", chat),
        ("chat-stream", "stream", "/v1/chat/completions", {**chat, **usage}),
        ("chat-error-empty-messages", "error", "/v1/chat/completions",
         {"model": model, "messages": []}),
        ("completion-error-no-prompt", "error", "/v1/completions", {"model": model}),
        ("model-info", "info", "/model_info", None),
        ("server-info", "info", "/server_info", None),
    ]


def record(base_url: str, model: str, out: Path, key: str | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, kind, path, body in exchanges(model):
        status, text = _call(base_url.rstrip("/") + path, key, body)
        payload: Any = text if kind == "stream" else json.loads(text)
        endpoint = "/v1/models/{model}" if path.startswith("/v1/models/") else path
        target = out / f"{name}.json"
        target.write_text(json.dumps({"kind": kind, "endpoint": endpoint, "request": body,
                                      "status": status, "body": payload}, indent=1) + "\n")
        written.append(target)
    return written


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    for path in record(sys.argv[1], sys.argv[2], Path(sys.argv[3]),
                       sys.argv[4] if len(sys.argv) == 5 else None):
        print(path)
