"""`opsctl exporter`: the running deployment's identity and the newest report files, on /metrics.

What runs is asked of a source at every scrape, never cached: the labels of the running server
containers (the CLI wires that to Docker), or a fixed profile and variant for a deployment opsctl
did not start. A source that fails with an OpsctlError (the daemon is down) reads as
`opsctl_deployment_lookup_success 0`, so the scrape itself still succeeds.

Report files are input, not trusted: one that is unreadable, not JSON, too large or of the
wrong shape is skipped (a warning in the log, once per file version, and
`opsctl_exporter_report_files_skipped`), and the next newest one counts. Neither a scrape nor
the exporter's start-up (which collects once) ever fails on a report file.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from opsctl.config.runspec import NO_PATCH
from opsctl.core import labels as keys
from opsctl.core.errors import OpsctlError, UsageError
from opsctl.core.reports import BENCH_GLOB, SMOKE_GLOB
from opsctl.observe.metrics import UNKNOWN, bench_families, merge_families, smoke_families
from opsctl.observe.servers import ServerSource, ServerStateCollector

if TYPE_CHECKING:
    from opsctl.config.profiles import Deployment


@dataclass(frozen=True)
class DeploymentInfo:
    """What is running: read from the container's opsctl.* labels, or from a profile."""

    profile: str
    variant: str
    image: str
    sglang_version: str
    patch_sha256: str

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> DeploymentInfo:
        return cls(
            profile=labels.get(keys.PROFILE, UNKNOWN),
            variant=labels.get(keys.VARIANT, UNKNOWN),
            image=labels.get(keys.IMAGE, UNKNOWN),
            sglang_version=labels.get(keys.SGLANG_VERSION, UNKNOWN),
            patch_sha256=labels.get(keys.PATCH_SHA256, NO_PATCH),
        )


InfoSource = Callable[[], list[DeploymentInfo]]
# The labels of each running opsctl server container, asked afresh at every call.
RunningServers = Callable[[], Iterable[Mapping[str, str]]]


def static_source(deployment: Deployment, image: str | None, patch_sha256: str) -> InfoSource:
    """Info from a resolved profile variant (no Docker): for a deployment opsctl did not start;
    `patch_sha256` is its image's patch-set digest label (the image room's), NO_PATCH without."""
    info = DeploymentInfo(
        profile=deployment.profile.name,
        variant=deployment.variant,
        image=image or deployment.image.repository,
        sglang_version=deployment.image.sglang_version,
        patch_sha256=patch_sha256,
    )
    return lambda: [info]


def running_source(running: RunningServers) -> InfoSource:
    """Info from the labels of the running server containers, asked at every scrape."""
    return lambda: [DeploymentInfo.from_labels(labels) for labels in running()]


class DeploymentCollector(Collector):
    """opsctl_deployment_info for what runs now, asked of `source` at every scrape."""

    def __init__(self, source: InfoSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "opsctl_deployment_info",
            "The running opsctl deployment (always 1); its labels say what runs.",
            labels=["profile", "variant", "image", "sglang_version", "patch_sha256"],
        )
        up = GaugeMetricFamily(
            "opsctl_deployment_lookup_success",
            "1 if the exporter could ask Docker what runs, else 0.", labels=[],
        )
        try:
            running = self._source()
        except OpsctlError:
            up.add_metric([], 0.0)
            yield up
            return
        for item in running:
            info.add_metric([item.profile, item.variant, item.image, item.sglang_version,
                             item.patch_sha256], 1.0)
        up.add_metric([], 1.0)
        yield info
        yield up


# Report files larger than this are skipped unread: opsctl's own are a few hundred KB.
MAX_REPORT_BYTES = 64 << 20
_LOG = logging.getLogger(__name__)
_BAD_SHAPE = (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError)
Families = Callable[[Any], list[Metric]]


def _smoke(report: Any) -> list[Metric]:
    if not isinstance(report, dict) or report.get("kind", "smoke") != "smoke":
        raise ValueError("not a smoke report")
    return list(smoke_families(report))


def _bench(report: Any) -> list[Metric]:
    if not isinstance(report, dict) or report.get("kind") != "bench":
        raise ValueError("not a bench report")
    return [family for variant in report["variants"] for family in bench_families(report, variant)]


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return -math.inf  # gone since the glob: sorts last, then fails to read and is skipped


class ReportFileCollector(Collector):
    """The newest smoke and bench report files under a folder, read at every scrape."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._warned: set[tuple[Path, float]] = set()

    def _read(self, path: Path) -> Any:
        with path.open("rb") as handle:
            raw = handle.read(MAX_REPORT_BYTES + 1)
        if len(raw) > MAX_REPORT_BYTES:
            raise ValueError(f"larger than {MAX_REPORT_BYTES} bytes")
        return json.loads(raw)

    def _newest(self, pattern: str, families: Families) -> tuple[list[Metric], int]:
        """The families of the newest good file, and how many newer ones were skipped."""
        try:
            files = sorted(self._folder.glob(pattern), key=_mtime, reverse=True)
        except OSError:
            return [], 0
        skipped = 0
        for path in files:
            try:
                return families(self._read(path)), skipped
            except (OSError, *_BAD_SHAPE) as exc:
                skipped += 1
                self._warn(path, exc)
        return [], skipped

    def _warn(self, path: Path, exc: BaseException) -> None:
        key = (path, _mtime(path))
        if key not in self._warned:
            self._warned.add(key)
            _LOG.warning("exporter: skipped report file %s (%s: %s)", path, type(exc).__name__,
                         " ".join(str(exc).split())[:200])

    def collect(self) -> Iterator[Metric]:
        smoke, smoke_skipped = self._newest(SMOKE_GLOB, _smoke)
        bench, bench_skipped = self._newest(BENCH_GLOB, _bench)
        skipped = GaugeMetricFamily(
            "opsctl_exporter_report_files_skipped",
            "Report files newer than the ones shown that this scrape skipped as unreadable, "
            "not JSON, too large or of the wrong shape.", labels=["kind"])
        skipped.add_metric(["smoke"], float(smoke_skipped))
        skipped.add_metric(["bench"], float(bench_skipped))
        yield from merge_families([*smoke, *bench])  # type: ignore[list-item]
        yield skipped


def exporter_registry(source: InfoSource, reports: Path | None,
                      servers: ServerSource | None = None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(DeploymentCollector(source))
    if servers is not None:
        registry.register(ServerStateCollector(servers))
    if reports is not None:
        registry.register(ReportFileCollector(reports))
    return registry


# The listen backlog of opsctl's own HTTP servers (the exporter, the metrics proxy): the
# standard library's default of 5 left 428 of 1,000 concurrent scrapes timing out; the kernel
# caps it at net.core.somaxconn.
LISTEN_BACKLOG = 1024


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every few seconds is not news."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-answer is not the exporter's problem."""


class _Server6(_Server):
    address_family = socket.AF_INET6


def start(registry: CollectorRegistry, address: str, port: int) -> tuple[Any, threading.Thread]:
    """Serve /metrics from a background thread; call `.shutdown()` on the server to stop."""
    server_class: type[_Server] = _Server6 if ":" in address else _Server
    try:
        server: _Server = make_server(address, port, make_wsgi_app(registry), server_class,
                                      _QuietHandler)
    except OSError as exc:
        raise UsageError(f"cannot listen on {address}:{port}: {exc.strerror}",
                         hint="pick another --port or stop what uses it") from None
    thread = threading.Thread(target=server.serve_forever, name="opsctl-exporter", daemon=True)
    thread.start()
    return server, thread


def serve_until_interrupted(server: Any, thread: threading.Thread) -> None:
    """Block until Ctrl-C (a normal way to stop the exporter), then stop serving."""
    try:
        while thread.is_alive():
            thread.join(timeout=1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
