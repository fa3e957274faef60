"""`opsctl report`: the dashboard's decode-latency panels, from Prometheus range queries.

For users without Grafana at hand (and for the README); `opsctl.observe.view` draws the PNG.
The queries are the dashboard's own (`opsctl.observe.dashboard.PANELS`), with the `$variant`
template variable set to a regex.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import httpx

from opsctl.core.errors import EXIT_LAUNCH, OpsctlError, UsageError
from opsctl.core.httpcap import answer_json
from opsctl.observe.dashboard import PanelSpec, decode_latency_panels

QUERY_TIMEOUT_SECONDS = 30.0


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
    body = _json_object(response)
    if response.status_code != 200 or body.get("status") != "success":
        reason = body.get("error") or " ".join(response.text[:200].split()) or "no answer"
        raise PrometheusError(f"query failed ({response.status_code}): {reason}",
                              hint=f"the expression was: {expr}")
    data = body.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list) or not all(isinstance(item, dict) for item in result):
        raise _malformed(client, "data.result is not a list of series")
    return result


def _json_object(response: httpx.Response) -> dict[str, Any]:
    """The answer as a JSON object; {} when it is not one (a proxy's HTML error page)."""
    try:
        body = answer_json(response)
    except ValueError:  # not JSON, not UTF-8, or nested too deeply
        return {}
    return body if isinstance(body, dict) else {}


def _malformed(client: httpx.Client, what: str) -> PrometheusError:
    return PrometheusError(f"Prometheus at {client.base_url} answered malformed data: {what}",
                           hint="is --prometheus a Prometheus server (its /api/v1/query_range)?")


def _points(
    client: httpx.Client, item: dict[str, Any]
) -> tuple[dict[str, str], list[tuple[float, float]]]:
    """A matrix series' labels and its (time, value) points, NaN points dropped."""
    labels, values = item.get("metric"), item.get("values")
    if not isinstance(labels, dict) or not isinstance(values, list):
        raise _malformed(client, "a series without a `metric` object and a `values` list")
    try:
        points = [(float(t), float(v)) for t, v in values if v != "NaN"]
    except (TypeError, ValueError):
        raise _malformed(client, "a series whose values are not [time, \"number\"] pairs") from None
    return {str(k): str(v) for k, v in labels.items()}, points


def fetch_panel(
    client: httpx.Client, spec: PanelSpec, variant_regex: str, start: float, end: float,
    step: float,
) -> list[Series]:
    out = []
    for query in spec.queries:
        for item in query_range(client, with_variant(query.expr, variant_regex), start, end, step):
            labels, points = _points(client, item)
            if not points:
                continue
            out.append(Series(legend_of(query.legend, labels), labels,
                              [p[0] for p in points], [p[1] for p in points]))
    return out


@dataclass(frozen=True)
class DecodeLatency:
    """The decode-latency panels' series over one time range, as Prometheus returned them."""

    panels: list[tuple[PanelSpec, list[Series]]]
    source: str  # the Prometheus base URL, for the picture's title
    start: float
    stop: float


def decode_latency(
    client: httpx.Client, since_seconds: float, variant_regex: str = ".*",
    step: float | None = None, end: float | None = None,
) -> DecodeLatency:
    """Query the decode-latency panels over the last `since_seconds` (ending at `end` or now)."""
    if since_seconds <= 0:
        raise UsageError("--since must be positive", hint="e.g. --since 30m")
    stop = end if end is not None else time.time()
    start = stop - since_seconds
    resolution = step or max(1.0, since_seconds / 300)
    panels = [(spec, fetch_panel(client, spec, variant_regex, start, stop, resolution))
              for spec in decode_latency_panels()]
    if not any(series for _, series in panels):
        raise PrometheusError(
            f"no data for the decode-latency panels in the last {since_seconds:g}s",
            hint="is Prometheus scraping sglang (job 'sglang') and loading opsctl's rules?",
        )
    return DecodeLatency(panels, str(client.base_url).rstrip("/"), start, stop)


def parse_duration(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd])", text.strip())
    if not match:
        raise UsageError(f"bad duration {text!r}", hint="use e.g. 90s, 30m, 2h")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
