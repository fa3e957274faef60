"""core.redact.redact: the one function every console line and every written file goes through."""

from __future__ import annotations

import base64
import io

import pytest

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
