"""opsctl's own HTTP servers hold a burst of concurrent scrapes (issue 25: with the standard
library's listen backlog of 5, 428 of 1,000 concurrent scrapes of the exporter timed out)."""

from __future__ import annotations

import socket
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry, Gauge

from opsctl.observe import exporter

CONCURRENT = 200


def _scrape(url: str | urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(url, timeout=20) as answer:  # noqa: S310 - loopback only
            answer.read()
            return int(answer.status)
    except OSError:
        return 0


def _burst(url: str) -> list[int]:
    with ThreadPoolExecutor(CONCURRENT) as pool:
        return list(pool.map(_scrape, [url] * CONCURRENT))


def test_the_exporter_listens_with_a_real_backlog() -> None:
    registry = CollectorRegistry()
    Gauge("opsctl_test_value", "a value", registry=registry).set(1)
    server, thread = exporter.start(registry, "127.0.0.1", 0)
    try:
        assert server.socket.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        assert server.request_queue_size >= CONCURRENT
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        for _ in range(2):
            answers = _burst(url)
            assert answers.count(200) == CONCURRENT, (
                f"{answers.count(200)} of {CONCURRENT} answered"
            )
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_an_address_in_use_is_one_line() -> None:
    from opsctl.core.errors import UsageError

    registry = CollectorRegistry()
    server, thread = exporter.start(registry, "127.0.0.1", 0)
    try:
        with pytest.raises(UsageError, match="cannot listen on 127.0.0.1"):
            exporter.start(registry, "127.0.0.1", server.server_port)
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_the_metrics_proxy_listens_with_a_real_backlog() -> None:
    from opsctl.observe import metricsproxy

    registry = CollectorRegistry()
    Gauge("sglang:num_running_reqs", "running", registry=registry).set(0)
    upstream, upstream_thread = exporter.start(registry, "127.0.0.1", 0)
    server, thread = metricsproxy.start(f"http://127.0.0.1:{upstream.server_port}", "t" * 32,
                                        "127.0.0.1", 0, None)
    try:
        assert server.request_queue_size >= CONCURRENT
        request = urllib.request.Request(f"http://127.0.0.1:{server.server_port}/metrics",
                                         headers={"Authorization": "Bearer " + "t" * 32})
        with ThreadPoolExecutor(CONCURRENT) as pool:
            answers = list(pool.map(_scrape, [request] * CONCURRENT))
        assert answers.count(200) == CONCURRENT, f"{answers.count(200)} of {CONCURRENT} answered"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        upstream.shutdown()
        upstream_thread.join(timeout=10)

