"""Everything the observe commands show: console lines, the dry-run listing, the report's PNG.

Logic modules return data; this module alone prints (rich) and draws (matplotlib, imported only
when a picture is drawn).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from opsctl.core.errors import UsageError
from opsctl.core.plotting import PLOT_EXTRA, drawing, load_matplotlib
from opsctl.observe import alertmanager, monitoring

if TYPE_CHECKING:
    from rich.console import Console

    from opsctl.observe.app import (
        MonitorComposeResult,
        MonitorUpResult,
    )
    from opsctl.observe.report import DecodeLatency

LINESTYLES = {"p50": "-", "p90": "--", "p99": ":"}


def show_rendered(console: Console, written: list[Path]) -> None:
    for path in written:
        console.print(str(path), highlight=False)


def dry_run_text(plan: monitoring.Plan) -> str:
    """What `monitor up --dry-run` prints: the rendered files, digests and `docker run` lines."""
    lines = [f"# config rendered to {plan.config_dir}:"]
    lines += [f"#   {path}" for path in sorted(plan.files)]
    for ref, digest in plan.digests.items():
        state = digest or "unresolved: recorded in monitoring/images.lock.json at first pull"
        lines.append(f"# {ref} digest: {state}")
    if plan.silent_receivers:
        lines.append(f"# {_silent(plan.silent_receivers)}")
    for spec in plan.specs:
        lines.append(" ".join(spec.docker_run_argv()))
    return "\n".join(lines)


def _silent(names: list[str]) -> str:
    return (f"warning: Alertmanager receiver(s) {', '.join(names)} have no integration, so "
            "their alerts reach no one: edit monitoring/alertmanager/receivers.yml")


def show_monitor_up(console: Console, result: MonitorUpResult) -> None:
    if result.dry_run:
        console.print(dry_run_text(result.plan), highlight=False, soft_wrap=True)
        return
    for name in result.started:
        console.print(f"started {name}", highlight=False)
    folder = result.plan.config_dir
    console.print(
        f"Grafana http://127.0.0.1:{monitoring.GRAFANA_PORT} (admin password in "
        f"{folder / monitoring.GRAFANA_PASSWORD_FILE}), Prometheus "
        f"http://127.0.0.1:{monitoring.PROMETHEUS_PORT}, Pushgateway "
        f"http://127.0.0.1:{monitoring.PUSHGATEWAY_PORT}, Alertmanager "
        f"http://127.0.0.1:{alertmanager.PORT}", highlight=False, soft_wrap=True)
    if result.plan.silent_receivers:
        console.print(_silent(result.plan.silent_receivers), style="yellow", highlight=False,
                      soft_wrap=True)


def show_monitor_compose(console: Console, result: MonitorComposeResult) -> None:
    console.print(str(result.compose_file), highlight=False, markup=False, soft_wrap=True)
    console.print(f"start it with: docker compose -f {result.compose_file} up -d (the admin "
                  f"password is in {result.plan.config_dir / monitoring.GRAFANA_PASSWORD_FILE})",
                  highlight=False, markup=False, soft_wrap=True)
    if result.plan.silent_receivers:
        console.print(_silent(result.plan.silent_receivers), style="yellow", highlight=False,
                      soft_wrap=True)


def show_monitor_down(console: Console, removed: list[str]) -> None:
    for name in removed:
        console.print(f"removed {name}", highlight=False)


def show_serving(console: Console, url: str) -> None:
    console.print(f"serving opsctl metrics on {url}", highlight=False)


def show_proxy(console: Console, url: str, upstream: str, tls: bool) -> None:
    console.print(f"serving {upstream}/metrics on {url} (bearer token required)",
                  highlight=False, soft_wrap=True)
    host = url.split("//", 1)[1].rsplit(":", 1)[0]
    if not tls and host not in ("127.0.0.1", "localhost", "[::1]"):
        console.print("warning: plain HTTP off loopback: the token crosses the network in clear "
                      "(use --tls-cert/--tls-key or an SSH tunnel)", style="yellow",
                      highlight=False, soft_wrap=True)


def show_written(console: Console, path: Path) -> None:
    console.print(f"wrote {path}", highlight=False)


@drawing
def plot_decode_latency(data: DecodeLatency, out: Path) -> Path:
    """Draw one subplot per decode-latency panel, a colour per variant, a dash per quantile."""
    matplotlib = load_matplotlib()
    if matplotlib is None:
        raise UsageError("drawing the panels needs matplotlib, which cannot be imported here",
                         hint=PLOT_EXTRA)
    mdates, plt = matplotlib.dates, matplotlib.pyplot

    panels, start, stop = data.panels, data.start, data.stop
    variants = sorted({s.labels.get("variant", "") for _, series in panels for s in series})
    colors = {v: plt.get_cmap("tab10")(i % 10) for i, v in enumerate(variants)}
    figure, axes = plt.subplots(len(panels), 1, figsize=(12, 3.2 * len(panels)), sharex=True,
                                squeeze=False)
    for axis, (spec, series) in zip(axes[:, 0], panels, strict=True):
        scale, unit = (1000.0, "ms") if spec.unit == "s" else (1.0, "tokens/s")
        for item in sorted(series, key=lambda s: s.legend):
            quantile = item.legend.rsplit(" ", 1)[-1]
            axis.plot(
                [datetime.fromtimestamp(t, UTC) for t in item.times],
                [v * scale for v in item.values],
                label=item.legend, color=colors[item.labels.get("variant", "")],
                linestyle=LINESTYLES.get(quantile, "-"), linewidth=1.4,
            )
        axis.set_title(spec.title, loc="left", fontsize=11)
        axis.set_ylabel(unit)
        axis.grid(True, alpha=0.3)
        axis.set_ylim(bottom=0)
        if series:  # outside the plot, so no line hides behind it
            axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[-1, 0].xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    axes[-1, 0].set_xlabel("time (UTC)")
    begin = datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%d %H:%M")
    figure.suptitle(f"Decode latency by variant: {begin} UTC, {(stop - start) / 60:.0f} min, "
                    f"Prometheus {data.source}", fontsize=10)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out
