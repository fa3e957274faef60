"""The observe commands, one function each, with their collaborators passed in.

The CLI connects the Docker engine (or builds the exporter's "what runs" source), opens the HTTP
client, picks the output paths, then hands the returned result to `opsctl.observe.view`. Nothing
here connects to Docker or prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from opsctl.observe import compose, metricsproxy, monitoring
from opsctl.observe import exporter as exporter_module
from opsctl.observe import report as report_module
from opsctl.observe.servers import ServerSource

if TYPE_CHECKING:
    import httpx

    from opsctl.config.profiles import Profile
    from opsctl.engine.api import Engine

DecodeLatencyPlot = Callable[[report_module.DecodeLatency, Path], Path]


@dataclass(frozen=True)
class MonitorUpResult:
    plan: monitoring.Plan
    dry_run: bool
    started: list[str]  # container names; empty on a dry run


@dataclass(frozen=True)
class ReportResult:
    path: Path
    data: report_module.DecodeLatency


def monitor_render(profile: Profile, root: Path, force: bool = False) -> list[Path]:
    """Write the scrape config, rules, Grafana provisioning and dashboard under `root` (an
    operator's file there is overwritten only with `force`); the files written."""
    return monitoring.write_files(monitoring.render_for_profile(profile),
                                  monitoring.config_folder(root, "--out"), force)


@dataclass(frozen=True)
class MonitorComposeResult:
    plan: monitoring.Plan
    compose_file: Path


def monitor_compose(profile: Profile, config_dir: Path, receivers: Path | None = None,
                    force: bool = False) -> MonitorComposeResult:
    """Write a folder `docker compose up -d` runs: the config `monitor up` renders, its Compose
    file, and the secrets it mounts (the Grafana password, Alertmanager's secrets folder). An
    operator's file there (one without opsctl's marker) is overwritten only with `force`."""
    plan = monitoring.plan(profile, config_dir, create_secrets=True, receivers_file=receivers,
                           force=force)
    monitoring.write_files(plan.files, config_dir, force)
    return MonitorComposeResult(plan, config_dir / compose.COMPOSE_FILE)


def monitor_up(profile: Profile, config_dir: Path, engine: Engine | None,
               receivers: Path | None = None, force: bool = False) -> MonitorUpResult:
    """Render the config into `config_dir` and (re)start the monitoring containers.

    `engine=None` is the dry run: the config is written, no secret is created, nothing is pulled
    or started. Otherwise each image is pulled once and pinned: the digest is recorded in the lock
    file at the first pull and must match it afterwards; the old containers are replaced.
    """
    plan = monitoring.plan(profile, config_dir, create_secrets=engine is not None,
                           receivers_file=receivers)
    monitoring.write_files(plan.files, config_dir)
    if engine is None:
        return MonitorUpResult(plan, dry_run=True, started=[])
    lock = monitoring.load_lock()
    refs = {spec.image: monitoring.resolve_digest(engine, spec.image, lock) for spec in plan.specs}
    if {k: v for k, v in lock.items() if k in refs} != refs:
        monitoring.save_lock({**lock, **refs})
    monitor_down(engine)
    started = [engine.run(replace(spec, image=refs[spec.image])).name for spec in plan.specs]
    return MonitorUpResult(plan, dry_run=False, started=started)


def monitor_down(engine: Engine) -> list[str]:
    """Stop and remove the monitoring containers (their names); their data volumes stay."""
    removed = []
    for info in engine.find(monitoring.monitoring_labels()):
        engine.stop_and_remove(info.id, grace_seconds=monitoring.STOP_GRACE_SECONDS)
        removed.append(info.name)
    return removed


def exporter(
    source: exporter_module.InfoSource, reports: Path | None, address: str, port: int,
    on_serving: Callable[[str], None], servers: ServerSource | None = None,
) -> None:
    """Serve opsctl_* metrics until interrupted; `on_serving` gets the URL once it listens.

    `servers` (the server containers, asked at every scrape) adds their restart counts and
    health; None for a deployment opsctl did not start.
    """
    registry = exporter_module.exporter_registry(source, reports, servers)
    server, thread = exporter_module.start(registry, address, port)
    url = f"http://{address}:{server.server_port}/metrics"
    on_serving(url)
    exporter_module.serve_until_interrupted(server, thread)


def metrics_proxy(
    upstream: str, token: str, address: str, port: int, tls: tuple[Path, Path] | None,
    on_serving: Callable[[str], None],
) -> None:
    """Serve the upstream's /metrics, and only that, behind `token` until interrupted;
    `on_serving` gets the URL once it listens."""
    server, thread = metricsproxy.start(upstream, token, address, port, tls)
    url = f"{'https' if tls else 'http'}://{address}:{server.server_port}/metrics"
    on_serving(url)
    exporter_module.serve_until_interrupted(server, thread)


def report(
    client: httpx.Client, out: Path, since_seconds: float, variant_regex: str = ".*",
    step: float | None = None, end: float | None = None, *, plot: DecodeLatencyPlot,
) -> ReportResult:
    """Query the decode-latency panels from the Prometheus behind `client`; `plot` draws them to
    `out` (the view's matplotlib drawing, passed in by the CLI)."""
    data = report_module.decode_latency(client, since_seconds, variant_regex, step, end)
    return ReportResult(plot(data, out), data)
