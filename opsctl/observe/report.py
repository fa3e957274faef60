"""`opsctl report`: the dashboard's decode-latency panels as a PNG, from Prometheus range queries.

For users without Grafana at hand (and for the README). The queries are the dashboard's own
(`opsctl.observe.dashboard.PANELS`), with the `$variant` template variable set to a regex.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from opsctl.core.errors import EXIT_LAUNCH, OpsctlError, UsageError
from opsctl.observe.dashboard import PanelSpec, decode_latency_panels

QUERY_TIMEOUT_SECONDS = 30.0
LINESTYLES = {"p50": "-", "p90": "--", "p99": ":"}


class PrometheusError(OpsctlError):
    """Prometheus did not answer, or had no data: exit 4, like any service that is not up."""

    exit_code = EXIT_LAUNCH


@dataclass(frozen=True)
class Series:
    legend: str
    labels: dict[str, str]
    times: list[float]
    values: list[float]


def with_variant(expr: str, variant_regex: str) -> str:
    """Substitute the dashboard's `$variant` the way Grafana does for a regex matcher."""
    return expr.replace("$variant", variant_regex)


def legend_of(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def query_range(
    client: httpx.Client, expr: str, start: float, end: float, step: float
) -> list[dict[str, Any]]:
    try:
        response = client.get("/api/v1/query_range",
                              params={"query": expr, "start": start, "end": end, "step": step})
    except httpx.HTTPError as exc:
        raise PrometheusError(
            f"Prometheus at {client.base_url} did not answer: {type(exc).__name__}",
            hint="pass --prometheus http://HOST:9090, or start it with `opsctl monitor up`",
        ) from None
    body = response.json() if response.headers.get("content-type", "").startswith(
        "application/json") else {}
    if response.status_code != 200 or body.get("status") != "success":
        raise PrometheusError(
            f"query failed ({response.status_code}): {body.get('error', response.text[:200])}",
            hint=f"the expression was: {expr}",
        )
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def fetch_panel(
    client: httpx.Client, spec: PanelSpec, variant_regex: str, start: float, end: float,
    step: float,
) -> list[Series]:
    out = []
    for query in spec.queries:
        for item in query_range(client, with_variant(query.expr, variant_regex), start, end, step):
            points = [(float(t), float(v)) for t, v in item["values"] if v not in ("NaN",)]
            if not points:
                continue
            labels = item["metric"]
            out.append(Series(legend_of(query.legend, labels), labels,
                              [p[0] for p in points], [p[1] for p in points]))
    return out


def render(
    prometheus_url: str, out: Path, since_seconds: float, variant_regex: str = ".*",
    step: float | None = None, end: float | None = None,
) -> Path:
    """Query the decode-latency panels over the last `since_seconds` and write a PNG."""
    if since_seconds <= 0:
        raise UsageError("--since must be positive", hint="e.g. --since 30m")
    stop = end if end is not None else time.time()
    start = stop - since_seconds
    resolution = step or max(1.0, since_seconds / 300)
    specs = decode_latency_panels()
    with httpx.Client(base_url=prometheus_url, timeout=QUERY_TIMEOUT_SECONDS) as client:
        panels = [(spec, fetch_panel(client, spec, variant_regex, start, stop, resolution))
                  for spec in specs]
    if not any(series for _, series in panels):
        raise PrometheusError(
            f"no data for the decode-latency panels in the last {since_seconds:g}s",
            hint="is Prometheus scraping sglang (job 'sglang') and loading opsctl's rules?",
        )
    return _plot(panels, out, prometheus_url, start, stop)


def _plot(panels: list[tuple[PanelSpec, list[Series]]], out: Path, source: str,
          start: float, stop: float) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

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
                    f"Prometheus {source}", fontsize=10)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def parse_duration(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if not match:
        raise UsageError(f"bad duration {text!r}", hint="use e.g. 90s, 30m, 2h")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
