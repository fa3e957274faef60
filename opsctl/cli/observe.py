"""Commands of the observe room: monitor render/up/down, exporter, metrics-proxy, report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opsctl.cli.app import ProfileOpt, app, command_group, console, non_empty
from opsctl.core.files import check_output_path
from opsctl.core.reports import REPORTS_DIR

if TYPE_CHECKING:
    from opsctl.engine.api import ContainerInfo

monitor_app = command_group(
    "Prometheus, Pushgateway, Alertmanager, Grafana and dcgm-exporter for this host (127.0.0.1 only).")
app.add_typer(monitor_app, name="monitor")


@monitor_app.command("render")
def monitor_render(
    profile: ProfileOpt = None,
    out: Annotated[str | None, typer.Option(
        "--out", help="Folder to write into (default: the checkout's monitoring/, rendered "
        "for the shipped profile).")] = None,
) -> None:
    """Render the scrape config, rules, Grafana provisioning and dashboard."""
    from opsctl.config.profiles import load_profile
    from opsctl.core.paths import project_root, require_checkout
    from opsctl.observe import app as observe
    from opsctl.observe import monitoring, view

    chosen = profile or (None if out else monitoring.SHIPPED_PROFILE)
    if not out:
        require_checkout("monitor render without --out", "--out DIR")
    root = check_output_path(Path(out) if out else project_root() / "monitoring", "--out",
                             directory=True)
    view.show_rendered(console, observe.monitor_render(load_profile(chosen), root))


@monitor_app.command("up")
def monitor_up(
    profile: ProfileOpt = None,
    config_dir: Annotated[str | None, typer.Option(
        "--config-dir", help="Where the rendered config goes (default: "
        "<state dir>/monitoring: $OPSCTL_STATE_DIR, else $XDG_STATE_HOME/opsctl, else "
        "~/.local/state/opsctl).", callback=non_empty)] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Render the config and print the docker run commands; start nothing."
    )] = False,
    receivers: Annotated[str | None, typer.Option(
        "--receivers", help="Alertmanager receivers file (default: the checkout's "
        "monitoring/alertmanager/receivers.yml).")] = None,
) -> None:
    """Start Prometheus, a Pushgateway, Alertmanager, Grafana and (with GPUs) dcgm-exporter,
    bound to 127.0.0.1."""
    from opsctl.config.profiles import load_profile
    from opsctl.observe import app as observe
    from opsctl.observe import monitoring, view

    loaded = load_profile(profile)
    folder = check_output_path(Path(config_dir) if config_dir else monitoring.default_config_dir(),
                               "--config-dir", directory=True)
    engine = None
    if not dry_run:
        from opsctl.engine.dockerpy import connect

        engine = connect()
    view.show_monitor_up(console, observe.monitor_up(
        loaded, folder, engine, Path(receivers) if receivers else None))


@monitor_app.command("compose")
def monitor_compose(
    profile: ProfileOpt = None,
    config_dir: Annotated[str | None, typer.Option(
        "--config-dir", help="Folder to write the config, secrets and compose.yaml into "
        "(default: <state dir>/monitoring, as `monitor up`).", callback=non_empty)] = None,
    receivers: Annotated[str | None, typer.Option(
        "--receivers", help="Alertmanager receivers file (default: the checkout's "
        "monitoring/alertmanager/receivers.yml).")] = None,
) -> None:
    """Write the stack `monitor up` starts as a folder for `docker compose up -d` (127.0.0.1
    only; images by their pinned tags)."""
    from opsctl.config.profiles import load_profile
    from opsctl.observe import app as observe
    from opsctl.observe import monitoring, view

    loaded = load_profile(profile)
    folder = check_output_path(Path(config_dir) if config_dir else monitoring.default_config_dir(),
                               "--config-dir", directory=True)
    view.show_monitor_compose(console, observe.monitor_compose(
        loaded, folder, Path(receivers) if receivers else None))


@monitor_app.command("down")
def monitor_down() -> None:
    """Stop and remove the monitoring containers (their data volumes stay)."""
    from opsctl.engine.dockerpy import connect
    from opsctl.observe import app as observe
    from opsctl.observe import view

    view.show_monitor_down(console, observe.monitor_down(connect()))


def _servers(profile: str | None) -> list[ContainerInfo]:
    """opsctl's server containers, running or not, asked of Docker afresh at every scrape.

    Connecting per call keeps the exporter alive across daemon restarts: an unreachable daemon
    raises DaemonUnreachable, which the exporter reports as a failed lookup, not a failed scrape.
    """
    from opsctl.deploy.app import find_servers
    from opsctl.engine.dockerpy import connect

    return find_servers(connect(), profile)


def _running_servers(profile: str | None) -> list[dict[str, str]]:
    """Labels of the running opsctl servers."""
    return [c.labels for c in _servers(profile) if c.status == "running"]


@app.command("exporter")
def exporter(
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Port to serve /metrics on.")] = 9464,
    address: Annotated[str, typer.Option("--address", help="Address to bind.")] = "127.0.0.1",
    profile: ProfileOpt = None,
    variant: Annotated[str | None, typer.Option(
        "--variant", "-v", help="Describe this variant of the profile instead of asking Docker "
        "what runs.", callback=non_empty)] = None,
    image: Annotated[str | None, typer.Option(
        "--image", help="Image reference to report with --variant.")] = None,
    reports: Annotated[str, typer.Option(
        "--reports", help="Folder of smoke/bench report files to serve.")] = str(REPORTS_DIR),
) -> None:
    """Serve opsctl_* metrics: the running deployment and the latest smoke and bench results."""
    from opsctl.config.profiles import load_profile
    from opsctl.observe import app as observe
    from opsctl.observe import view
    from opsctl.observe.exporter import running_source, static_source

    if variant:
        source = static_source(load_profile(profile).resolve(variant), image)
    else:
        source = running_source(lambda: _running_servers(profile))
    observe.exporter(source, Path(reports), address, port,
                     on_serving=lambda url: view.show_serving(console, url),
                     servers=None if variant else (lambda: _servers(profile)))


@app.command("metrics-proxy")
def metrics_proxy(
    token_file: Annotated[str | None, typer.Option(
        "--token-file", help="File holding the bearer token (mode 600).")] = None,
    token_env: Annotated[str | None, typer.Option(
        "--token-env", help="Name of the environment variable holding the bearer token.")] = None,
    upstream: Annotated[str | None, typer.Option(
        "--upstream", help="sglang base URL (default: the profile's server).")] = None,
    address: Annotated[str, typer.Option(
        "--address", help="Address to bind; off loopback only where a remote Prometheus "
        "needs it.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Port to serve /metrics on.")] = 9465,
    tls_cert: Annotated[str | None, typer.Option(
        "--tls-cert", help="PEM certificate: serve HTTPS.")] = None,
    tls_key: Annotated[str | None, typer.Option(
        "--tls-key", help="PEM private key of --tls-cert.")] = None,
    profile: ProfileOpt = None,
) -> None:
    """Serve sglang's /metrics, and nothing else, to a remote Prometheus behind a bearer token."""
    from opsctl.config.profiles import load_profile
    from opsctl.core.errors import UsageError
    from opsctl.core.httpcap import checked_base_url
    from opsctl.observe import app as observe
    from opsctl.observe import view
    from opsctl.observe.metricsproxy import read_token, upstream_for

    if (tls_cert is None) != (tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together", hint="give both or neither")
    token = read_token(Path(token_file) if token_file else None, token_env)
    base = checked_base_url(upstream or upstream_for(load_profile(profile)),
                            "--upstream").rstrip("/")
    tls = (Path(tls_cert), Path(tls_key)) if tls_cert and tls_key else None
    observe.metrics_proxy(base, token, address, port, tls,
                          on_serving=lambda url: view.show_proxy(console, url, base, bool(tls)))


@app.command("report")
def report(
    prometheus: Annotated[str, typer.Option(
        "--prometheus", help="Prometheus base URL.")] = "http://127.0.0.1:9090",
    since: Annotated[str, typer.Option("--since", help="Time range back from now.")] = "30m",
    variant: Annotated[str, typer.Option(
        "--variant", help="Regex of variants to draw (the dashboard's $variant).")] = ".*",
    out: Annotated[str, typer.Option(
        "--out", help="PNG to write.")] = str(REPORTS_DIR / "decode-latency.png"),
) -> None:
    """Render the dashboard's decode-latency panels to a PNG from Prometheus data."""
    from opsctl.core.httpcap import capped_client, checked_base_url
    from opsctl.observe import app as observe
    from opsctl.observe import view
    from opsctl.observe.report import QUERY_TIMEOUT_SECONDS, parse_duration

    since_seconds = parse_duration(since)
    base_url = checked_base_url(prometheus, "--prometheus")
    check_output_path(Path(out), "--out")
    with capped_client(base_url=base_url, timeout_s=QUERY_TIMEOUT_SECONDS) as client:
        result = observe.report(client, Path(out), since_seconds, variant,
                                plot=view.plot_decode_latency)
    view.show_written(console, result.path)
