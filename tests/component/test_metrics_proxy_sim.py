"""`opsctl metrics-proxy` as a user runs it, in front of the sglang simulator on loopback: the
right token gets sglang's /metrics, a missing or wrong one gets 401, and nothing else of the
API gets through. Then the same over HTTPS with a throwaway self-signed certificate."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import SimServer

TOKEN = "proxy-test-token-0123456789abcdef"
DEADLINE_S = 30.0


def _start_proxy(upstream: str, port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OPSCTL_TEST_METRICS_TOKEN": TOKEN}
    with log.open("wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "opsctl", "metrics-proxy", "--token-env",
             "OPSCTL_TEST_METRICS_TOKEN", "--upstream", upstream, "--port", str(port), *extra],
            env=env, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait_serving(process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while "serving" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"metrics-proxy did not start:\n{log.read_text()}")
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@pytest.fixture
def sim(sim_server: Callable[..., SimServer]) -> SimServer:
    return sim_server(args=["--served-model-name", "glm-5", "--enable-metrics",
                            "--extra-metric-labels", '{"variant": "gathercast"}'])


@pytest.fixture
def proxy(sim: SimServer, free_port: Callable[[], int], tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = tmp_path / "proxy.log"
    process = _start_proxy(sim.url, port, log)
    try:
        _wait_serving(process, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(process)
        assert TOKEN not in log.read_text()  # the token is never printed


def test_the_right_token_gets_sglangs_metrics(proxy: str) -> None:
    response = httpx.get(f"{proxy}/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
                         timeout=10)
    assert response.status_code == 200
    assert 'sglang:num_running_reqs{' in response.text and 'variant="gathercast"' in response.text


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-the-token-0123456789"},
                                     {"Authorization": TOKEN}])
def test_a_missing_or_wrong_token_is_401(proxy: str, headers: dict[str, str]) -> None:
    response = httpx.get(f"{proxy}/metrics", headers=headers, timeout=10)
    assert response.status_code == 401
    assert "sglang" not in response.text


def test_nothing_but_metrics_reaches_the_server(proxy: str, sim: SimServer) -> None:
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{sim.url}/v1/models", timeout=10).status_code == 200  # there, directly
    assert httpx.get(f"{proxy}/v1/models", headers=good, timeout=10).status_code == 404
    completion = httpx.post(f"{proxy}/v1/completions", headers=good, timeout=10,
                            json={"model": "glm-5", "prompt": "hi", "max_tokens": 1})
    assert completion.status_code == 404
    assert httpx.post(f"{proxy}/metrics", headers=good, timeout=10).status_code == 405


def test_a_dead_upstream_is_a_502_not_a_crash(
    free_port: Callable[[], int], tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "proxy.log"
    process = _start_proxy(f"http://127.0.0.1:{free_port()}", port, log)
    try:
        _wait_serving(process, log)
        response = httpx.get(f"http://127.0.0.1:{port}/metrics",
                             headers={"Authorization": f"Bearer {TOKEN}"}, timeout=15)
        assert response.status_code == 502
        assert process.poll() is None
    finally:
        _stop(process)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_with_a_certificate(sim: SimServer, free_port: Callable[[], int],
                                  tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    port, log = free_port(), tmp_path / "proxy.log"
    process = _start_proxy(sim.url, port, log, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        _wait_serving(process, log)
        assert f"https://127.0.0.1:{port}/metrics" in log.read_text()
        trust = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(verify=trust, timeout=10) as client:
            response = client.get(f"https://127.0.0.1:{port}/metrics",
                                  headers={"Authorization": f"Bearer {TOKEN}"})
            assert response.status_code == 200 and "sglang:" in response.text
            assert client.get(f"https://127.0.0.1:{port}/metrics").status_code == 401
        with pytest.raises(httpx.HTTPError):  # plain HTTP to the TLS port gets no answer
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        _stop(process)
