"""Control-plane deadlines bound the whole exchange, not each read (issue 25, item 4).

A real server on loopback sends one header line a second (or one body byte a second): every
read returns within a second, so httpx's per-read timeouts never fire. Before the fix, `up
--timeout 10` waited past 90 s, `verify --timeout 10` 160 s and `metrics-proxy` in front of such
a server answered 0 of 200 scrapes within 60 s. Each test here bounds what it waits for by the
trickling server's own `max_seconds` (60 s): code without a whole-exchange deadline runs into
that bound and fails the assertion; with the deadline each run ends near its timeout.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from conftest import REPO_ROOT
from fakes import FakeEngine
from simprofile import sim_profile_data, write_profile
from trickle import TrickleServer

from opsctl.config.profiles import load_profile
from opsctl.core import labels
from opsctl.core.clock import SYSTEM_CLOCK
from opsctl.core.errors import EXIT_LAUNCH, LaunchError
from opsctl.core.httpcap import capped_client
from opsctl.deploy import readiness
from opsctl.deploy.launch import Launch, up
from opsctl.observe import metricsproxy
from opsctl.traffic.client import make_client

IMAGE = "opsctl/sim:deadline-test"
# Far under the trickle's 60 s: python start-up and a loaded 2-core machine fit many times over.
SLACK_S = 20.0


@pytest.mark.parametrize("mode", ["headers", "body"])
def test_a_sync_client_ends_the_whole_exchange_at_its_timeout(mode: str) -> None:
    with TrickleServer(mode) as server, capped_client(timeout_s=2) as client:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout, match="no whole answer within 2s"):
            client.get(f"{server.url}/v1/models")
        assert time.monotonic() - started < SLACK_S


@pytest.mark.parametrize("mode", ["headers", "body"])
def test_an_async_client_ends_the_whole_exchange_at_its_timeout(mode: str) -> None:
    async def ask(url: str) -> None:
        async with make_client(url, None, timeout_s=2) as client:
            await client.get("/health_generate")

    with TrickleServer(mode) as server:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout, match="no whole answer within 2s"):
            asyncio.run(ask(server.url))
        assert time.monotonic() - started < SLACK_S


def test_ups_readiness_wait_ends_at_its_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    monkeypatch.chdir(tmp_path)  # removed servers' logs go under out/logs/ here
    with TrickleServer("headers") as server:
        data, _ = sim_profile_data("deadline", server.port)
        deployment = load_profile(str(write_profile(data, tmp_path))).resolve(None)
        engine = FakeEngine(images={IMAGE: {labels.PATCH_SHA256: "abc123"}})
        started = time.monotonic()
        with pytest.raises(LaunchError, match="not ready after 3 s") as caught:
            up(deployment, Launch(engine=engine, image_for=lambda _: IMAGE, verify=None,
                                      state=None, http=readiness.http_client,
                                      clock=SYSTEM_CLOCK, preflight=None),
                   timeout_seconds=3, logs_dir=tmp_path / "logs")
        waited = time.monotonic() - started
    assert waited < SLACK_S, f"`up --timeout 3` waited {waited:.0f} s"
    assert "timed out" in caught.value.message
    assert not [c for c in engine.containers.values() if c.status == "running"]


def test_verify_timeout_bounds_each_request_in_total() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPSCTL_API")}
    with TrickleServer("headers") as server:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "opsctl", "verify", "--profile", "sim", "--base-url", server.url,
             "--timeout", "2"], capture_output=True, text=True, env=env, cwd=REPO_ROOT,
            timeout=120, stdin=subprocess.DEVNULL)
        waited = time.monotonic() - started
    assert done.returncode == EXIT_LAUNCH, done.stderr
    assert "did not answer within 2s" in done.stderr and "Traceback" not in done.stderr
    assert waited < SLACK_S, f"`verify --timeout 2` took {waited:.0f} s"


def _scrape(url: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": "Bearer deadline-token"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback only
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def test_metrics_proxy_answers_every_scrape_of_a_trickling_upstream_in_time() -> None:
    concurrent = 50
    with TrickleServer("headers") as upstream:
        server, thread = metricsproxy.start(upstream.url, "deadline-token", "127.0.0.1", 0)
        try:
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            started = time.monotonic()
            with ThreadPoolExecutor(concurrent) as pool:
                answers = list(pool.map(_scrape, [url] * concurrent))
            took = time.monotonic() - started
        finally:
            server.shutdown()
            thread.join(timeout=10)
    assert answers.count(504) == concurrent, f"{answers.count(504)} of {concurrent} got a 504"
    assert took < metricsproxy.UPSTREAM_TIMEOUT_S + SLACK_S
