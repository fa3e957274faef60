"""The Prometheus operator's and Grafana's objects: what `opsctl monitor` sets up on one host,
for a cluster.

- PodMonitors (monitoring.coreos.com/v1) scrape every serving pod's `/metrics` (sglang's, with
  `--enable-metrics` and the variant label the argv adds) and the router's metrics port. The
  sglang targets get `job="sglang"`, the job opsctl's scrape config names and its rules query
  (`up{job="sglang"}` in SglangServerDown), so the rules mean the same here.
- A PrometheusRule holds the groups `opsctl monitor render` writes to monitoring/prometheus/
  rules/, built by the same functions from the profile's SLO (observe/promrules.py,
  promslo.py): nothing is copied. It is named after the profile, not the variant, so two
  variants rendered into one namespace share one copy of each recording rule.
- The "Decode latency" dashboard (observe/dashboard.py) as a ConfigMap labelled
  grafana_dashboard: "1", the label Grafana's dashboard sidecar loads by default; its panels
  pick the data source through a variable, so it works with the cluster's Prometheus.

The opsctl_* series (smoke, bench, gate, restarts) come from opsctl's exporter and Pushgateway,
which are not part of this render: their alerts stay silent without them (docs/kubernetes.md).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from opsctl.core import labels
from opsctl.observe import dashboard
from opsctl.observe.monitoring import DASHBOARD_FILE
from opsctl.observe.promnames import slo_rules
from opsctl.observe.promrules import PRODUCTION_TIMING, alert_rules, recording_rules
from opsctl.render import meta
from opsctl.render.router import router_name
from opsctl.render.target import Target

MONITORING_API = "monitoring.coreos.com/v1"
SGLANG_JOB = "sglang"  # the job name in observe/promconfig.py and promrules.py
GRAFANA_DASHBOARD_LABEL = ("grafana_dashboard", "1")
DASHBOARD_NAME = "opsctl-decode-latency"


def monitoring_objects(target: Target) -> list[dict[str, Any]]:
    return [_pod_monitor(target, target.name, labels.ROLE_SERVER, "http", SGLANG_JOB),
            _pod_monitor(target, router_name(target), labels.ROLE_ROUTER, "metrics", None),
            _prometheus_rule(target), _dashboard(target)]


def _pod_monitor(target: Target, name: str, role: str, port: str, job: str | None
                 ) -> dict[str, Any]:
    endpoint: dict[str, Any] = {"port": port, "path": "/metrics"}
    if job:
        endpoint["relabelings"] = [{"action": "replace", "targetLabel": "job",
                                    "replacement": job}]
    return {"apiVersion": MONITORING_API, "kind": "PodMonitor",
            "metadata": target.metadata(name, role),
            "spec": {"selector": {"matchLabels": target.selector(role)},
                     "podMetricsEndpoints": [endpoint]}}


def _shared_metadata(target: Target, name: str, extra: dict[str, str]) -> dict[str, Any]:
    """Objects every variant of the profile shares carry no variant label."""
    meta.check_object_name(name)
    found = {**target.app_labels(labels.ROLE_MONITORING, target.profile_name),
             labels.MANAGED: labels.TRUE, labels.ROLE: labels.ROLE_MONITORING, **extra}
    return {"name": name, "namespace": target.namespace, "labels": dict(sorted(found.items()))}


def _prometheus_rule(target: Target) -> dict[str, Any]:
    profile = target.deployment.profile
    slos = slo_rules(profile)
    groups = [*recording_rules(slos, PRODUCTION_TIMING)["groups"],
              *alert_rules(slos, PRODUCTION_TIMING)["groups"]]
    name = f"opsctl-{profile.name}"
    metadata = _shared_metadata(target, name, {
        labels.PROFILE: meta.check_label(labels.PROFILE, profile.name)})
    return {"apiVersion": MONITORING_API, "kind": "PrometheusRule", "metadata": metadata,
            "spec": {"groups": groups}}


def _dashboard(target: Target) -> dict[str, Any]:
    key, value = GRAFANA_DASHBOARD_LABEL
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _shared_metadata(target, DASHBOARD_NAME, {key: value}),
            "data": {PurePosixPath(DASHBOARD_FILE).name: dashboard.dashboard_json()}}
