"""JSON a server answers that nests too deeply is the server's fault (adversarial pass).

httpx's `Response.json()` raises RecursionError on `[[[...]]]`; callers caught ValueError only,
so the RecursionError reached the CLI, which reads a decoder's RecursionError as the user's
input (exit 2, 'a profile, report or answer nests far deeper'): smoke stopped at exit 2 on a
deep /server_info instead of judging the metrics check, verify said exit 2 for its server's
/server_info. `core.httpcap.answer_json` turns it into ValueError where every caller looks.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from opsctl.core.errors import EXIT_LAUNCH, LaunchError
from opsctl.core.httpcap import CappedAsyncTransport, answer_json
from opsctl.traffic.smoke import _server_version
from opsctl.verify.app import fetch_json

DEEP = b"[" * 200_000 + b"]" * 200_000


def test_answer_json_says_value_error_for_json_nested_too_deeply() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        answer_json(httpx.Response(200, content=DEEP))
    assert answer_json(httpx.Response(200, content=b'{"a": 1}')) == {"a": 1}


def _version(body: bytes) -> str | None:
    async def run() -> str | None:
        transport = CappedAsyncTransport(httpx.MockTransport(
            lambda request: httpx.Response(200, content=body)))
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
            return await _server_version(client, 5.0)
    return asyncio.run(run())


@pytest.mark.parametrize("body", [
    DEEP, b'{"version": ' + DEEP + b"}", b'{"version": 0.5}', b'{"version": NaN}',
    json.dumps({"version": "x" * 10240}).encode(), json.dumps({"version": "0.5.15\nx"}).encode(),
    json.dumps({"version": "[bold]0.5.15"}).encode(), json.dumps({"version": ""}).encode(),
    b'{"version": "' + b"a" * (50 << 20) + b'"}',  # past the 8 MiB body cap
])
def test_a_hostile_server_info_names_no_release(body: bytes) -> None:
    assert _version(body) is None


def test_a_real_looking_server_info_names_its_release() -> None:
    assert _version(json.dumps({"version": "0.5.15", "x": [1]}).encode()) == "0.5.15"


def test_verify_reads_a_deep_server_info_as_the_servers_fault() -> None:
    client = httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=DEEP)), base_url="http://server")
    with pytest.raises(LaunchError, match="not a JSON object") as caught:
        fetch_json(client, "/server_info", 5.0)
    assert caught.value.exit_code == EXIT_LAUNCH
