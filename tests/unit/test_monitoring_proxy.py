"""`opsctl metrics-proxy` in-process: the token rules, what is answered to whom, and how an
upstream failure reads (httpx.MockTransport stands in for sglang)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from opsctl.config.profiles import load_profile
from opsctl.core.errors import UsageError
from opsctl.core.httpcap import MAX_BODY_BYTES, CappedTransport
from opsctl.observe.metricsproxy import Reply, fetch_metrics, handle, read_token, upstream_for

TOKEN = "0123456789abcdef0123"
METRICS = b'# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{variant="a"} 2.0\n'


def _token_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_the_token_comes_from_a_private_file_or_a_named_variable(tmp_path: Path) -> None:
    assert read_token(_token_file(tmp_path, TOKEN + "\n"), None) == TOKEN
    assert read_token(None, "OPSCTL_METRICS_TOKEN", {"OPSCTL_METRICS_TOKEN": TOKEN}) == TOKEN


@pytest.mark.parametrize(("file_text", "mode", "env", "message"), [
    (None, 0, None, "exactly one of"),
    (TOKEN, 0o644, None, "readable by every user"),
    ("short", 0o600, None, "shorter than 16"),
    (None, 0, "UNSET_VARIABLE", "shorter than 16"),
])
def test_a_missing_weak_or_exposed_token_is_refused(
    tmp_path: Path, file_text: str | None, mode: int, env: str | None, message: str
) -> None:
    path = _token_file(tmp_path, file_text, mode) if file_text is not None else None
    with pytest.raises(UsageError, match=message) as error:
        read_token(path, env, {})
    assert TOKEN not in str(error.value) and TOKEN not in error.value.hint


def test_both_sources_at_once_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="exactly one of"):
        read_token(_token_file(tmp_path, TOKEN), "X", {"X": TOKEN})


def _ok(accept: str | None) -> Reply:
    return Reply(200, METRICS + (accept or "").encode())


@pytest.mark.parametrize("authorization", [
    None, "", "Bearer", "Bearer wrong-token-0123456789", f"Basic {TOKEN}", TOKEN,
    f"Bearer {TOKEN}x",
])
def test_without_the_exact_bearer_token_nothing_is_answered_but_401(
    authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    for path in ("/metrics", "/v1/models", "/server_info"):
        reply = handle("GET", path, headers, TOKEN, _ok)
        assert reply.status == 401
        assert ("WWW-Authenticate", 'Bearer realm="opsctl-metrics"') in reply.headers


def test_with_the_token_only_get_metrics_is_forwarded() -> None:
    good = {"Authorization": f"bearer {TOKEN}", "Accept": "text/plain"}
    reply = handle("GET", "/metrics?x=1", good, TOKEN, _ok)
    assert reply.status == 200 and reply.body == METRICS + b"text/plain"
    for path in ("/v1/chat/completions", "/flush_cache", "/metrics/../v1/models", "/"):
        assert handle("GET", path, good, TOKEN, _ok).status == 404
    assert handle("POST", "/metrics", good, TOKEN, _ok).status == 405


def _client(handler: httpx.MockTransport) -> httpx.Client:
    return httpx.Client(transport=CappedTransport(handler))


def test_the_upstream_answer_is_passed_through_with_its_type() -> None:
    seen: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=METRICS,
                              headers={"content-type": "text/plain; version=0.0.4"})

    reply = fetch_metrics(_client(httpx.MockTransport(upstream)), "http://sglang:30000/",
                          "application/openmetrics-text")
    assert (reply.status, reply.body, reply.content_type) == (
        200, METRICS, "text/plain; version=0.0.4")
    assert str(seen[0].url) == "http://sglang:30000/metrics"
    assert seen[0].headers["accept"] == "application/openmetrics-text"
    assert "authorization" not in seen[0].headers  # the token is never passed upstream


@pytest.mark.parametrize(("respond", "status", "text"), [
    (lambda r: httpx.Response(503, content=b"loading"), 502, b"answered 503"),
    (lambda r: httpx.Response(200, content=b"x" * (MAX_BODY_BYTES + 1)), 502, b"larger than"),
    (lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused", request=r)), 502,
     b"unreachable (ConnectError)"),
    (lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("slow", request=r)), 504, b"took more"),
])
def test_an_upstream_failure_is_a_short_gateway_error(respond: object, status: int,
                                                       text: bytes) -> None:
    reply = fetch_metrics(_client(httpx.MockTransport(respond)),  # type: ignore[arg-type]
                          "http://sglang:30000", None)
    assert reply.status == status and text in reply.body


def test_the_default_upstream_is_the_profiles_server_on_loopback() -> None:
    profile = load_profile("sim")
    assert upstream_for(profile) == "http://127.0.0.1:30000"
    everywhere = profile.model_copy(update={"container": profile.container.model_copy(
        update={"publish_address": "0.0.0.0", "host_port": 31000})})
    assert upstream_for(everywhere) == "http://127.0.0.1:31000"
