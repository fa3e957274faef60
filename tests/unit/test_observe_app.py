"""The observe commands' application functions with their collaborators faked: an in-memory
engine for `monitor up/down`, an httpx MockTransport standing in for Prometheus for `report`."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from opsctl.config.profiles import Profile, load_profile
from opsctl.core import labels as keys
from opsctl.core.errors import UsageError
from opsctl.core.paths import PROJECT_DIR_ENV, project_root
from opsctl.engine.api import ContainerInfo, RunSpec
from opsctl.observe import app, monitoring
from opsctl.observe.report import PrometheusError
from opsctl.observe.view import plot_decode_latency

END = 1795953600.0  # 2026-11-29T12:00:00Z


def _container(name: str, role: str) -> ContainerInfo:
    return ContainerInfo(id=name, name=name, status="running", exit_code=None,
                         labels={keys.MANAGED: keys.TRUE, keys.ROLE: role}, image="x",
                         started_at="")


class FakeEngine:
    """The engine calls monitoring makes, kept in memory; every registry digest is 'a' * 64."""

    def __init__(self, containers: list[ContainerInfo]) -> None:
        self.containers = list(containers)
        self.pulled: list[str] = []
        self.ran: list[RunSpec] = []

    def image_repo_digests(self, ref: str) -> list[str]:
        return []

    def pull_image(self, ref: str) -> list[str]:
        self.pulled.append(ref)
        return [ref.rsplit(":", 1)[0] + "@sha256:" + "a" * 64]

    def find(self, labels: dict[str, str]) -> list[ContainerInfo]:
        return [c for c in self.containers if labels.items() <= c.labels.items()]

    def stop_and_remove(self, container_id: str, grace_seconds: int) -> None:
        self.containers = [c for c in self.containers if c.id != container_id]

    def run(self, spec: RunSpec) -> ContainerInfo:
        self.ran.append(spec)
        info = ContainerInfo(id=spec.name, name=spec.name, status="running", exit_code=None,
                             labels=spec.labels, image=spec.image, started_at="")
        self.containers.append(info)
        return info


@pytest.fixture
def sim_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Profile:
    """The sim profile, with the images file, its lock and the receivers in a private project."""
    profile = load_profile("sim")
    (tmp_path / "project" / "monitoring" / "alertmanager").mkdir(parents=True)
    for name in ("images.yaml", "alertmanager/receivers.yml"):
        shutil.copy(
            project_root() / "monitoring" / name, tmp_path / "project" / "monitoring" / name
        )
    monkeypatch.setenv(PROJECT_DIR_ENV, str(tmp_path / "project"))
    return profile


def test_monitor_up_pins_pulled_digests_and_replaces_only_monitoring(
    sim_profile: Profile, tmp_path: Path
) -> None:
    engine = FakeEngine([_container("old-grafana", keys.ROLE_MONITORING),
                         _container("sglang", keys.ROLE_SERVER)])
    result = app.monitor_up(sim_profile, tmp_path / "config", engine)  # type: ignore[arg-type]
    assert not result.dry_run
    assert result.started == ["opsctl-prometheus", "opsctl-pushgateway", "opsctl-alertmanager",
                              "opsctl-grafana"]
    assert [c.name for c in engine.containers] == ["sglang", *result.started]
    images = monitoring.load_images()
    assert engine.pulled == [images.prometheus, images.pushgateway, images.alertmanager,
                             images.grafana]
    assert all("@sha256:" in spec.image for spec in engine.ran)
    lock = json.loads(monitoring.lock_path().read_text())
    assert set(lock) == set(engine.pulled)
    assert (tmp_path / "config" / "prometheus" / "prometheus.yml").is_file()
    assert (tmp_path / "config" / monitoring.GRAFANA_PASSWORD_FILE).is_file()
    assert (tmp_path / "config" / "alertmanager" / "alertmanager.yml").is_file()
    # Alertmanager (uid nobody) can enter its secrets folder; no other host user gets that far.
    secrets = tmp_path / "config" / "secrets" / "alertmanager"
    assert secrets.stat().st_mode & 0o777 == 0o755
    assert secrets.parent.stat().st_mode & 0o077 == 0


def test_monitor_up_dry_run_starts_nothing_and_creates_no_secret(
    sim_profile: Profile, tmp_path: Path
) -> None:
    result = app.monitor_up(sim_profile, tmp_path, engine=None)
    assert result.dry_run and result.started == []
    assert [s.name for s in result.plan.specs] == [
        "opsctl-prometheus", "opsctl-pushgateway", "opsctl-alertmanager", "opsctl-grafana"]
    assert result.plan.silent_receivers == ["critical", "warning"]  # as shipped: no integration
    assert (tmp_path / "grafana" / monitoring.DASHBOARD_FILE).is_file()
    assert not (tmp_path / monitoring.GRAFANA_PASSWORD_FILE).exists()
    assert not (tmp_path / "secrets").exists()
    assert not monitoring.lock_path().exists()


def test_monitor_down_removes_only_monitoring_containers() -> None:
    engine = FakeEngine([_container("opsctl-prometheus", keys.ROLE_MONITORING),
                         _container("sglang", keys.ROLE_SERVER)])
    result = app.monitor_down(engine)  # type: ignore[arg-type]
    assert result == ["opsctl-prometheus"]
    assert [c.name for c in engine.containers] == ["sglang"]


def test_exporter_on_a_taken_port_fails_before_announcing_itself() -> None:
    announced: list[str] = []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(UsageError, match="cannot listen"):
            app.exporter(lambda: [], None, "127.0.0.1", sock.getsockname()[1],
                         on_serving=announced.append)
    assert announced == []


def _prometheus(queries: list[str], value: str | None) -> httpx.Client:
    """A Prometheus that answers every range query with one gathercast series (or none)."""

    def handle(request: httpx.Request) -> httpx.Response:
        queries.append(request.url.params["query"])
        result: list[dict[str, Any]] = []
        if value is not None:
            result = [{"metric": {"variant": "gathercast"},
                       "values": [[END - 60, value], [END - 30, "NaN"], [END, value]]}]
        return httpx.Response(200, json={"status": "success",
                                         "data": {"resultType": "matrix", "result": result}})

    return httpx.Client(base_url="http://prometheus.test:9090",
                        transport=httpx.MockTransport(handle))


def test_report_draws_the_dashboards_queries_with_the_variant_substituted(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot is the [plot] extra")  # a PNG asserted
    queries: list[str] = []
    with _prometheus(queries, "0.025") as client:
        result = app.report(
            client,
            tmp_path / "decode.png",
            plot=plot_decode_latency,
            since_seconds=120,
            variant_regex="gathercast",
            end=END,
        )
    assert result.path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.data.source == "http://prometheus.test:9090"
    assert queries and all("$variant" not in q and 'variant=~"gathercast"' in q for q in queries)
    series = [s for _, panel in result.data.panels for s in panel]
    assert series and all(s.values == [0.025, 0.025] for s in series)  # NaN points dropped


def test_report_without_data_fails_and_writes_nothing(tmp_path: Path) -> None:
    with _prometheus([], None) as client, pytest.raises(PrometheusError, match="no data"):
        app.report(
            client, tmp_path / "decode.png", plot=plot_decode_latency, since_seconds=120, end=END
        )
    assert not (tmp_path / "decode.png").exists()


def test_report_refuses_an_empty_range(tmp_path: Path) -> None:
    with _prometheus([], "1") as client, pytest.raises(UsageError, match="positive"):
        app.report(client, tmp_path / "decode.png", plot=plot_decode_latency, since_seconds=0)
