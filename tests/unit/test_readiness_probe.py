"""The readiness probe of `up` against hostile and key-protected servers over real HTTP."""

from __future__ import annotations

import pytest
from fakes import FakeClock
from hostile import MODEL, HostileServer

from opsctl.core.errors import LaunchError
from opsctl.core.httpcap import MAX_BODY_BYTES
from opsctl.deploy import readiness
from opsctl.deploy.readiness import Phase

KEY = "sk-hostile-sentinel-key-4242"


def wait(server: HostileServer, client_key: str | None) -> float:
    with readiness.http_client(client_key) as client:
        return readiness.wait_ready(lambda: readiness.probe(client, server.url, MODEL),
                                    exited=lambda: None, timeout_seconds=3600, poll_seconds=5,
                                    clock=FakeClock())


def test_a_key_protected_server_becomes_ready_with_the_key_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSCTL_API_KEY", KEY)
    with HostileServer("auth", key=KEY, sglang=True) as server:
        assert wait(server, None) == 0.0
        models = [r for r in server.requests if r.path == "/v1/models"]
    assert models and all(r.headers.get("authorization") == f"Bearer {KEY}" for r in models)


@pytest.mark.parametrize("client_key", [None, "sk-the-wrong-key-0000"])
def test_a_refused_key_fails_at_once_instead_of_waiting_out_the_timeout(
        client_key: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPSCTL_API_KEY", raising=False)
    with (
        HostileServer("auth", key=KEY, sglang=True) as server,
        pytest.raises(LaunchError) as caught,
    ):
        wait(server, client_key)
    assert "/v1/models answered 401" in caught.value.message
    assert "OPSCTL_API_KEY" in caught.value.hint
    assert len([r for r in server.requests if r.path == "/v1/models"]) == 1  # no second poll


def test_an_endless_model_list_keeps_the_server_warming_with_the_cap_named() -> None:
    with HostileServer("endless_models", max_seconds=60, sglang=True) as server, \
            readiness.http_client() as client:
        state = readiness.probe(client, server.url, MODEL)
        assert state.phase is Phase.WARMING and "exceeds the 8 MiB cap" in state.detail
        assert server.bytes_sent < 4 * MAX_BODY_BYTES


@pytest.mark.parametrize("mode", ["close_models", "html_502", "empty_models", "markup"])
def test_hostile_model_lists_are_not_ready(mode: str) -> None:
    with HostileServer(mode, sglang=True) as server, readiness.http_client() as client:
        state = readiness.probe(client, server.url, MODEL)
    assert state.phase is Phase.WARMING and not state.refused and "\n" not in state.detail
