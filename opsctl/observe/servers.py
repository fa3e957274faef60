"""What Docker knows about the sglang server containers, for `opsctl exporter` to serve.

sglang cannot say that it restarted (its /metrics is gone while it is down, and no series it
exports survives a restart), nor whether its own health check fails; the engine can. At every
scrape the exporter asks for opsctl's server containers and serves, per profile and variant:

- `opsctl_server_restarts_total`: how often the engine's restart policy restarted the
  container (Docker's RestartCount). It starts again at 0 with a new container, which
  `increase()` treats as a counter reset; the crash-loop alert counts it over an hour.
- `opsctl_server_healthy`: 1 or 0 from the container's HEALTHCHECK (Docker's State.Health),
  served only while the container runs and its check has a verdict (not `starting`, and not
  for a container without a check).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from opsctl.core import labels as keys
from opsctl.core.errors import OpsctlError
from opsctl.engine.api import ContainerInfo
from opsctl.observe.metrics import UNKNOWN

ServerSource = Callable[[], Iterable[ContainerInfo]]
LABELS = ["profile", "variant"]
HEALTHY = {"healthy": 1.0, "unhealthy": 0.0}


class ServerStateCollector(Collector):
    """Restart counts and health of opsctl's server containers, asked of `source` per scrape.

    A failed lookup (the daemon is down) yields nothing here: `opsctl_deployment_lookup_success`
    of the deployment collector already says so.
    """

    def __init__(self, source: ServerSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        try:
            servers = list(self._source())
        except OpsctlError:
            return
        restarts = CounterMetricFamily(
            "opsctl_server_restarts", "Restarts of the sglang server container by the engine's "
            "restart policy (Docker's RestartCount; 0 again for a new container).", labels=LABELS)
        healthy = GaugeMetricFamily(
            "opsctl_server_healthy", "1 if the server container's health check passes, 0 if it "
            "fails; absent while starting or without a health check.", labels=LABELS)
        # One container per profile and variant (a duplicate sample would fail the scrape): the
        # running one where there is one.
        chosen: dict[tuple[str, str], ContainerInfo] = {}
        for info in sorted(servers, key=lambda i: i.status == "running"):
            chosen[(info.labels.get(keys.PROFILE, UNKNOWN),
                    info.labels.get(keys.VARIANT, UNKNOWN))] = info
        for values, info in sorted(chosen.items()):
            restarts.add_metric(list(values), float(info.restart_count))
            if info.status == "running" and info.health in HEALTHY:
                healthy.add_metric(list(values), HEALTHY[info.health])
        yield restarts
        yield healthy
