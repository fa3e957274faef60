"""The one HTTP client smoke and bench share: OpenAI-compatible requests, timed, never guessing.

A request never raises for a server-side problem: it returns a `RequestResult` whose `error`
says what went wrong (connect, timeout, http status, stream cut, error event), so a sweep can
count failures instead of aborting. Timing uses `time.perf_counter()` at the moment each SSE line
is read; ITL gaps are measured between successive chunks that carry generated text.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import BaseModel

from opsctl.core.errors import LaunchError, UsageError

API_KEY_ENV = "OPSCTL_API_KEY"

Api = Literal["completions", "chat"]
ErrorKind = Literal[
    "connect", "timeout", "http_status", "stream_cut", "stream_error", "bad_response", "empty"
]
TokenSource = Literal["usage", "chunks"]

# Finish reasons a healthy completion may end with; "abort" or a missing one is a failure.
SANE_FINISH_REASONS = frozenset({"stop", "length"})


class ServerUnreachable(LaunchError):
    """Nothing answers at the URL (connection refused, DNS, TLS): exit 4, like a failed launch."""


def parse_api(value: str) -> Api:
    if value == "completions":
        return "completions"
    if value == "chat":
        return "chat"
    raise UsageError(f"--api {value!r}: choose 'completions' or 'chat'")


def api_key_from_env() -> str | None:
    value = os.environ.get(API_KEY_ENV, "").strip()
    return value or None


def mask_secret(secret: str | None) -> str | None:
    """`****` + the last 4 characters; a short secret shows nothing of itself."""
    if not secret:
        return None
    return "****" + (secret[-4:] if len(secret) >= 12 else "")


def redact(text: str, secret: str | None) -> str:
    """Replace every occurrence of the secret in a message that may echo it back."""
    if not secret:
        return text
    return text.replace(secret, mask_secret(secret) or "****")


@dataclass(slots=True)
class RequestResult:
    """One generation request, successful or not. Times are seconds from the request start."""

    ok: bool
    error_kind: ErrorKind | None = None
    error: str | None = None
    status: int | None = None
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    token_source: TokenSource = "chunks"
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    content_chunks: int = 0

    @property
    def tpot_s(self) -> float | None:
        """(e2e - ttft) / (output_tokens - 1); undefined for fewer than two tokens."""
        if self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def fail(self, kind: ErrorKind, message: str) -> RequestResult:
        self.ok = False
        self.error_kind = kind
        self.error = message
        return self


def make_client(
    base_url: str, api_key: str | None, *, max_connections: int = 16, timeout_s: float = 60.0
) -> httpx.AsyncClient:
    """An AsyncClient with enough pooled connections for the requested concurrency.

    Proxies from the environment are ignored: opsctl talks to a server it deployed or was given
    by URL, and a corporate proxy in between would distort every latency it measures.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        headers=headers,
        limits=limits,
        timeout=httpx.Timeout(timeout_s),
        trust_env=False,
    )


def request_body(
    api: Api,
    model: str,
    prompt: str,
    *,
    max_tokens: int,
    stream: bool,
    temperature: float = 0.0,
    ignore_eos: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": stream,
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream:
        # Token counts come from the server's own usage chunk, not from counting chunks.
        body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        # sglang and vLLM extension: generate exactly max_tokens so lengths are fixed.
        body["ignore_eos"] = True
    return body


def _path(api: Api) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


def _choice_text(api: Api, choice: dict[str, Any]) -> str:
    if api == "chat":
        delta = choice.get("delta") or choice.get("message") or {}
        # A reasoning model streams its thinking first; those are generated tokens too.
        return (delta.get("reasoning_content") or "") + (delta.get("content") or "")
    return choice.get("text") or ""


def _error_message(payload: Any) -> str:
    if isinstance(payload, dict):
        inner = payload.get("error", payload)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
    return str(payload)[:300]


async def stream_generate(
    client: httpx.AsyncClient,
    api: Api,
    body: dict[str, Any],
    *,
    timeout_s: float,
) -> RequestResult:
    """Send one streaming request; time every text chunk; classify any failure."""
    result = RequestResult(ok=False)
    start = time.perf_counter()
    last_token_at: float | None = None
    done = False
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", _path(api), json=body) as response:
                result.status = response.status_code
                if response.status_code != 200:
                    raw = await response.aread()
                    return result.fail(
                        "http_status", f"HTTP {response.status_code}: {_body_message(raw)}"
                    )
                async for line in response.aiter_lines():
                    now = time.perf_counter()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        return result.fail("bad_response", f"unparseable SSE data: {data[:80]!r}")
                    if not isinstance(chunk, dict):
                        return result.fail("bad_response", f"unexpected SSE data: {data[:80]!r}")
                    if "error" in chunk:
                        return result.fail("stream_error", _error_message(chunk))
                    usage = chunk.get("usage")
                    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                        result.output_tokens = int(usage["completion_tokens"])
                        result.prompt_tokens = usage.get("prompt_tokens")
                        result.token_source = "usage"
                    for choice in chunk.get("choices") or []:
                        text = _choice_text(api, choice)
                        if text:
                            if last_token_at is None:
                                result.ttft_s = now - start
                            else:
                                result.itl_s.append(now - last_token_at)
                            last_token_at = now
                            result.content_chunks += 1
                            result.text += text
                        if choice.get("finish_reason"):
                            result.finish_reason = choice["finish_reason"]
    except TimeoutError:
        return result.fail("timeout", f"no complete response within {timeout_s:g}s")
    except httpx.ConnectError as exc:
        return result.fail("connect", f"cannot connect: {exc}")
    except httpx.TimeoutException as exc:
        return result.fail("timeout", f"{type(exc).__name__} after {timeout_s:g}s")
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        return result.fail("stream_cut", f"stream ended early: {type(exc).__name__}: {exc}")
    except httpx.HTTPError as exc:
        return result.fail("stream_cut", f"{type(exc).__name__}: {exc}")
    if not done:
        return result.fail("stream_cut", "stream closed before data: [DONE]")
    result.e2e_s = time.perf_counter() - start
    if result.token_source == "chunks":
        result.output_tokens = result.content_chunks
    if result.ttft_s is None:
        return result.fail("empty", "stream finished without any generated text")
    if result.finish_reason not in SANE_FINISH_REASONS:
        return result.fail("bad_response", f"finish_reason {result.finish_reason!r}")
    result.ok = True
    return result


async def generate(
    client: httpx.AsyncClient,
    api: Api,
    body: dict[str, Any],
    *,
    timeout_s: float,
) -> RequestResult:
    """Send one non-streaming request and parse text, finish_reason and usage."""
    result = RequestResult(ok=False)
    start = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post(_path(api), json=body)
    except TimeoutError:
        return result.fail("timeout", f"no response within {timeout_s:g}s")
    except httpx.ConnectError as exc:
        return result.fail("connect", f"cannot connect: {exc}")
    except httpx.TimeoutException as exc:
        return result.fail("timeout", f"{type(exc).__name__} after {timeout_s:g}s")
    except httpx.HTTPError as exc:
        return result.fail("stream_cut", f"{type(exc).__name__}: {exc}")
    result.e2e_s = time.perf_counter() - start
    result.status = response.status_code
    if response.status_code != 200:
        return result.fail(
            "http_status", f"HTTP {response.status_code}: {_body_message(response.content)}"
        )
    try:
        payload = response.json()
        choice = payload["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return result.fail("bad_response", f"not a completion: {response.text[:120]!r}")
    result.text = _choice_text(api, choice)
    result.finish_reason = choice.get("finish_reason")
    usage = payload.get("usage") or {}
    if usage.get("completion_tokens") is not None:
        result.output_tokens = int(usage["completion_tokens"])
        result.prompt_tokens = usage.get("prompt_tokens")
        result.token_source = "usage"
    if not result.text.strip():
        return result.fail("empty", "empty generated text")
    if result.finish_reason not in SANE_FINISH_REASONS:
        return result.fail("bad_response", f"finish_reason {result.finish_reason!r}")
    result.ok = True
    return result


def _body_message(raw: bytes) -> str:
    try:
        return _error_message(json.loads(raw))
    except ValueError:
        return raw[:200].decode(errors="replace")


# --- the served model name: read from the server, never guessed ------------------------------


class ModelResolution(BaseModel):
    """Which model name and tokenizer path opsctl used, and where each came from."""

    served_name: str
    served_name_source: str
    listed: list[str]
    profile_alias: str | None = None
    tokenizer_path: str | None = None
    tokenizer_source: str = "not read"
    notes: list[str] = []


def choose_served_name(
    listed: list[str], requested: str | None, profile_alias: str | None
) -> tuple[str, str, list[str]]:
    """Pick the name to send as `model` from what /v1/models lists.

    Returns (name, source, notes); raises ValueError with a user-facing message when no
    unambiguous choice exists. A single listed model is used whatever it is called (a path,
    or a name that differs from the profile's alias): the server is the authority.
    """
    notes: list[str] = []
    if not listed:
        raise ValueError("/v1/models lists no model")
    if requested:
        if requested in listed:
            return requested, "--model, listed by /v1/models", notes
        raise ValueError(f"--model {requested!r} is not served; /v1/models lists: {_names(listed)}")
    if len(listed) == 1:
        name = listed[0]
        if profile_alias and profile_alias != name:
            notes.append(
                f"the server serves {name!r}, not the profile's alias {profile_alias!r}; "
                f"used the served name"
            )
        return name, "the only model listed by /v1/models", notes
    if profile_alias and profile_alias in listed:
        return profile_alias, "profile served_name, listed by /v1/models", notes
    why = f"none is the profile's alias {profile_alias!r}" if profile_alias else "which one?"
    raise ValueError(f"/v1/models lists {len(listed)} models ({_names(listed)}); {why}")


def _names(listed: list[str]) -> str:
    return ", ".join(repr(name) for name in listed)


async def list_models(client: httpx.AsyncClient, timeout_s: float) -> list[str]:
    """GET /v1/models -> ids. Raises ServerUnreachable, or ValueError for a bad answer."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/v1/models")
    except httpx.ConnectError as exc:
        raise ServerUnreachable(
            f"no server answers at {client.base_url}: {exc}",
            hint="is it running? `opsctl status`, or check --base-url",
        ) from None
    except (TimeoutError, httpx.TimeoutException):
        raise ValueError(f"GET /v1/models did not answer within {timeout_s:g}s") from None
    if response.status_code in (401, 403):
        raise ValueError(
            f"GET /v1/models: HTTP {response.status_code} (the server wants an API key; "
            f"set ${API_KEY_ENV})"
        )
    if response.status_code != 200:
        raise ValueError(f"GET /v1/models: HTTP {response.status_code}")
    try:
        return [str(card["id"]) for card in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"GET /v1/models: not a model list: {response.text[:120]!r}") from None


async def read_model_info(
    client: httpx.AsyncClient, timeout_s: float
) -> tuple[dict[str, Any] | None, str]:
    """sglang's GET /model_info. Returns (payload, how it went); None when not sglang."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/model_info")
    except (TimeoutError, httpx.HTTPError) as exc:
        return None, f"GET /model_info failed: {type(exc).__name__}"
    if response.status_code == 404:
        return None, "the server has no /model_info (not sglang)"
    if response.status_code in (401, 403):
        return None, f"GET /model_info: HTTP {response.status_code} (API key missing or wrong)"
    if response.status_code != 200:
        return None, f"GET /model_info: HTTP {response.status_code}"
    try:
        payload = response.json()
    except ValueError:
        return None, "GET /model_info: not JSON"
    if not isinstance(payload, dict) or "model_path" not in payload:
        return None, "GET /model_info: no model_path (not sglang)"
    return payload, "ok"


def tokenizer_from_model_info(info: dict[str, Any]) -> tuple[str | None, str]:
    """sglang's own order (benchmark/serving.py): tokenizer_path, then model_path."""
    if info.get("tokenizer_path"):
        return str(info["tokenizer_path"]), "/model_info tokenizer_path"
    if info.get("model_path"):
        return str(info["model_path"]), "/model_info model_path"
    return None, "/model_info has neither tokenizer_path nor model_path"
