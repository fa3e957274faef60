"""Commands of the observe room: monitor render/up/down, exporter, report."""

from __future__ import annotations

from typing import Annotated

import typer

from opsctl.cli.app import ProfileOpt, app, console

monitor_app = typer.Typer(
    help="Prometheus, Pushgateway and Grafana for this host (127.0.0.1 only).",
    no_args_is_help=True,
)
app.add_typer(monitor_app, name="monitor")


@monitor_app.command("render")
def monitor_render(
    profile: ProfileOpt = None,
    out: Annotated[str | None, typer.Option(
        "--out", help="Folder to write into (default: the checkout's monitoring/, rendered "
        "for the shipped profile).")] = None,
) -> None:
    """Render the scrape config, rules, Grafana provisioning and dashboard."""
    from pathlib import Path

    from opsctl.core.paths import project_root
    from opsctl.deploy.profiles import load_profile
    from opsctl.observe import monitoring

    chosen = profile or (None if out else monitoring.SHIPPED_PROFILE)
    files = monitoring.render_for_profile(load_profile(chosen))
    root = Path(out) if out else project_root() / "monitoring"
    for path in monitoring.write_files(files, root):
        console.print(str(path), highlight=False)


@monitor_app.command("up")
def monitor_up(
    profile: ProfileOpt = None,
    config_dir: Annotated[str | None, typer.Option(
        "--config-dir", help="Where the rendered config goes (default: "
        "$XDG_STATE_HOME/opsctl/monitoring).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Render the config and print the docker run commands; start nothing."
    )] = False,
) -> None:
    """Start Prometheus, a Pushgateway and Grafana as containers bound to 127.0.0.1."""
    from pathlib import Path

    from opsctl.deploy.profiles import load_profile
    from opsctl.observe import monitoring

    loaded = load_profile(profile)
    folder = Path(config_dir) if config_dir else monitoring.default_config_dir()
    if dry_run:
        result = monitoring.plan(loaded, folder, create_secrets=False)
        monitoring.write_files(result.files, folder)
        console.print(monitoring.dry_run_text(result), highlight=False, soft_wrap=True)
        return
    from opsctl.engine.dockerpy import Engine

    for name in monitoring.up(Engine.connect(), loaded, folder):
        console.print(f"started {name}", highlight=False)
    console.print(
        f"Grafana http://127.0.0.1:{monitoring.GRAFANA_PORT} (admin password in "
        f"{folder / monitoring.GRAFANA_PASSWORD_FILE}), Prometheus "
        f"http://127.0.0.1:{monitoring.PROMETHEUS_PORT}, Pushgateway "
        f"http://127.0.0.1:{monitoring.PUSHGATEWAY_PORT}", highlight=False, soft_wrap=True)


@monitor_app.command("down")
def monitor_down() -> None:
    """Stop and remove the monitoring containers (their data volumes stay)."""
    from opsctl.engine.dockerpy import Engine
    from opsctl.observe import monitoring

    for name in monitoring.down(Engine.connect()):
        console.print(f"removed {name}", highlight=False)


@app.command("exporter")
def exporter(
    port: Annotated[int, typer.Option("--port", help="Port to serve /metrics on.")] = 9464,
    address: Annotated[str, typer.Option("--address", help="Address to bind.")] = "127.0.0.1",
    profile: ProfileOpt = None,
    variant: Annotated[str | None, typer.Option(
        "--variant", "-v", help="Describe this variant of the profile instead of asking Docker "
        "what runs.")] = None,
    image: Annotated[str | None, typer.Option(
        "--image", help="Image reference to report with --variant.")] = None,
    reports: Annotated[str, typer.Option(
        "--reports", help="Folder of smoke/bench report files to serve.")] = "out",
) -> None:
    """Serve opsctl_* metrics: the running deployment and the latest smoke and bench results."""
    from pathlib import Path

    from opsctl.observe import metrics

    source = (metrics.static_source(profile, variant, image) if variant
              else metrics.docker_source(profile))
    registry = metrics.exporter_registry(source, Path(reports))
    console.print(f"serving opsctl metrics on http://{address}:{port}/metrics", highlight=False)
    metrics.serve(registry, address, port)


@app.command("report")
def report(
    prometheus: Annotated[str, typer.Option(
        "--prometheus", help="Prometheus base URL.")] = "http://127.0.0.1:9090",
    since: Annotated[str, typer.Option("--since", help="Time range back from now.")] = "30m",
    variant: Annotated[str, typer.Option(
        "--variant", help="Regex of variants to draw (the dashboard's $variant).")] = ".*",
    out: Annotated[str, typer.Option("--out", help="PNG to write.")] = "out/decode-latency.png",
) -> None:
    """Render the dashboard's decode-latency panels to a PNG from Prometheus data."""
    from pathlib import Path

    from opsctl.observe import report as report_module

    path = report_module.render(prometheus, Path(out), report_module.parse_duration(since), variant)
    console.print(f"wrote {path}", highlight=False)

