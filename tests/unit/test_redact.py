"""core.redact.redact: the one function every console line and every written file goes through."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

from opsctl.core.files import atomic_write_text
from opsctl.core.httpcap import checked_base_url
from opsctl.core.redact import API_KEY_ENV, RedactingStream, redact

BASIC = base64.b64encode(b"admin:hunter2-pw").decode()


@pytest.mark.parametrize("text, expected", [
    ("http://admin:hunter2@h:1/x", "http://****@h:1/x"),
    (f'{{"auth": "Basic {BASIC}"}}', '{"auth": "Basic ****"}'),
    (f"model-of-Basic {BASIC} text", "model-of-Basic **** text"),
    ("Authorization: Bearer eyJhbGciOi.J9.abc", "Authorization: Bearer ****"),
    # Words are not credentials: they do not decode to user:password, or are too short.
    ("basic arithmetic and Basic auth", "basic arithmetic and Basic auth"),
    ("a bearer token required; Bearer of news", "a bearer token required; Bearer of news"),
])
def test_redact_masks_userinfo_and_echoed_credentials(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_the_api_key_from_the_environment_is_always_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "sk-planted-key-123456")
    assert redact("echo sk-planted-key-123456 and Bearer sk-planted-key-123456") == \
        "echo ****3456 and Bearer ****3456"


def test_the_console_stream_redacts_and_follows_the_current_target() -> None:
    targets = [io.StringIO()]
    stream = RedactingStream(lambda: targets[-1])
    stream.write("serving http://u:p@h/metrics\n")
    targets.append(io.StringIO())  # sys.stdout swapped (typer's runner, pytest's capture)
    stream.write(f"echo Basic {BASIC}\n")
    assert [t.getvalue() for t in targets] == ["serving http://****@h/metrics\n",
                                               "echo Basic ****\n"]


# --- secrets by value, in every form (issue 37, item 3) ---------------------------------------


@pytest.mark.parametrize("text, expected", [
    # a query string's secret, whatever else the URL holds
    ("GET http://h:1/v1?api_key=k3y-VALUE-1&x=1", "GET http://h:1/v1?api_key=****&x=1"),
    ("wss://h/s?token=abc.def&model=m", "wss://h/s?token=****&model=m"),
    ("http://h/?key=AIzaSyA-1234", "http://h/?key=****"),
    ("retry with password=hunter2!, then", "retry with password=****, then"),
    # a foreign JSON payload (a /server_info, an error body) under a secret's name
    ('{"api_key": "s3rv3r-key", "admin_api_key": "adm1n", "tp_size": 8}',
     '{"api_key": "****", "admin_api_key": "****", "tp_size": 8}'),
    ('{"detail": "bad", "X-Auth-Token": "t0k\\"en"}', '{"detail": "bad", "X-Auth-Token": "****"}'),
    # userinfo: escaped slashes (JSON), an unencoded `@` in the password
    ('{"url": "http:\\/\\/u:pw@h\\/x"}', '{"url": "http:\\/\\/****@h\\/x"}'),
    ("redis://u:p@ss@h:6379/0", "redis://****@h:6379/0"),
    # not secrets: counts, tokenizer tokens, a selector, an already masked value
    ('{"max_tokens": 16, "eos_token": "</s>", "num_key": "a"}',
     '{"max_tokens": 16, "eos_token": "</s>", "num_key": "a"}'),
    ("--node-selector key=value max_tokens=8", "--node-selector key=value max_tokens=8"),
    ('{"api_key": "****1234"}', '{"api_key": "****1234"}'),
])
def test_secrets_are_masked_by_where_they_sit(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_the_api_key_is_masked_url_encoded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, "k/ey+with=signs&more")
    text = "echo k%2Fey%2Bwith%3Dsigns%26more / k%2Fey%2Bwith%3Dsigns%26more"
    assert "signs" not in redact(text)


def test_a_named_urls_secrets_are_masked_in_every_form() -> None:
    """A server may echo the Basic token httpx sent for `http://user:pass@...` without its
    `Basic ` prefix, or the password URL-encoded or decoded."""
    checked_base_url("http://admin:p%40ss-w0rd@127.0.0.1:30000/?api_key=q-key-123",
                     "--base-url")
    token = base64.b64encode(b"admin:p@ss-w0rd").decode()
    text = f"token {token}; pw p@ss-w0rd or p%40ss-w0rd; key q-key-123"
    shown = redact(text)
    assert all(secret not in shown for secret in (token, "p@ss-w0rd", "p%40ss-w0rd", "q-key-123"))


def test_a_foreign_payload_is_masked_where_it_is_stored(tmp_path: Path) -> None:
    """bench stores a server's whole /server_info; the atomic writer scrubs what it holds."""
    checked_base_url("http://ops:s3cret-pw@127.0.0.1:1", "--base-url")
    basic = base64.b64encode(b"ops:s3cret-pw").decode()
    info = {"server_info": {"api_key": "the-server's-key", "echo": basic,
                            "dist_init_addr": "tcp://root:hunter22@10.0.0.1:5000"}}
    stored = atomic_write_text(tmp_path / "bench.json", json.dumps(info)).read_text()
    assert all(secret not in stored for secret in ("the-server's-key", basic, "hunter22"))


@pytest.mark.parametrize("text", ["x" * 200_000, "a=" * 100_000, '"a":' * 50_000,
                                  "&" * 200_000, "a://" * 50_000, '"' * 200_000,
                                  "\\" * 200_000, "http://" + "@" * 200_000])
def test_redact_stays_linear(text: str) -> None:
    """Behaviour on long hostile runs (the timing is bench/redact_scaling.py's): it returns,
    and keeps what holds no secret."""
    assert len(redact(text)) <= len(text) + 8


def test_a_secret_named_by_variable_stays_a_name() -> None:
    assert redact("-e 'HF_TOKEN=$HF_TOKEN' password=${DB_PW}") == \
        "-e 'HF_TOKEN=$HF_TOKEN' password=${DB_PW}"


def test_a_trace_findings_signature_is_no_secret_but_a_presigned_urls_is() -> None:
    finding = '{"signature": "full_pool_kv_cast", "share": 0.99}'
    assert redact(finding) == finding  # opsctl's own trace report (CI's trace capture test)
    masked = redact("https://bucket.example/o?X-Amz-Signature=abcdef0123456789&x=1")
    assert "abcdef0123456789" not in masked and "x=1" in masked
