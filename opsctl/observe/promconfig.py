"""Prometheus configuration, recording rules and alert rules, rendered from one place.

The committed files under monitoring/prometheus/ are this module's output for the shipped
profile (a test asserts they are identical), so `promtool check/test rules` exercises exactly
what `opsctl monitor up` runs. Tests render the same rules with short windows (`TEST_TIMING`)
to watch an alert fire against a live simulator within seconds.

Every sglang selector matches both spellings of the prefix, `sglang:` (what the server emits)
and `sglang_` (what sgl-router's /engine_metrics rewrites it to), with a `__name__` regex.
Metric names, types and labels are read from the sglang sources opsctl pins: 0.5.23
(sglang/srt/observability/metrics_collector.py, http_request_metrics.py) and 0.5.9
(sglang/srt/metrics/collector.py, utils/common.py). Every series used here exists in both, except
the per-request TPOT histogram, which 0.5.9 lacks: TPOT records fall back to per-token ITL there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from opsctl.core.errors import ProfileError

if TYPE_CHECKING:
    from opsctl.deploy.profiles import Profile

# sglang's default ITL/TPOT buckets, identical in 0.5.23 (observability/metrics_collector.py,
# TokenizerMetricsCollector) and 0.5.9 (metrics/collector.py);
# `--bucket-inter-token-latency` replaces them. A burn-rate rule needs a bucket edge exactly
# at the TPOT SLO, so the SLO must be one of these (or of the profile's override).
SGLANG_ITL_BUCKETS: tuple[float, ...] = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
    0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
)
BUCKET_FLAG = "--bucket-inter-token-latency"

RUNBOOK = "docs/observability.md#runbook"
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
# The window of rate() in recording rules; fixed so that dashboards can name the records.
RATE_WINDOW = "5m"
TPOT = "request_time_per_output_token_seconds"
ITL = "inter_token_latency_seconds"


def sglang(name: str, matchers: str = "") -> str:
    """A selector for an sglang series under either prefix, e.g. sglang("num_running_reqs")."""
    extra = f", {matchers}" if matchers else ""
    return f'{{__name__=~"sglang[:_]{name}"{extra}}}'


@dataclass(frozen=True)
class BurnWindow:
    """One multi-window burn-rate alert: both windows must burn faster than `factor`."""

    short: str
    long: str
    factor: float
    for_: str


@dataclass(frozen=True)
class RuleTiming:
    """Windows and `for:` durations; production values follow the SRE workbook's burn rates."""

    fast_burn: BurnWindow
    slow_burn: BurnWindow
    server_down_for: str
    kv_cache_for: str
    errors_for: str
    smoke_failing_for: str
    smoke_stale_seconds: int
    errors_window: str


PRODUCTION_TIMING = RuleTiming(
    fast_burn=BurnWindow(short="5m", long="1h", factor=14.4, for_="2m"),
    slow_burn=BurnWindow(short="30m", long="6h", factor=6.0, for_="15m"),
    server_down_for="1m",
    kv_cache_for="10m",
    errors_for="5m",
    smoke_failing_for="0s",
    smoke_stale_seconds=24 * 3600,
    errors_window="5m",
)
# Test-only: the same rules with windows of seconds, for a live Prometheus scraping the simulator
# every second. Never shipped; alert semantics (what fires, on which labels) are unchanged.
TEST_TIMING = RuleTiming(
    fast_burn=BurnWindow(short="10s", long="30s", factor=14.4, for_="0s"),
    slow_burn=BurnWindow(short="20s", long="60s", factor=6.0, for_="0s"),
    server_down_for="0s",
    kv_cache_for="0s",
    errors_for="0s",
    smoke_failing_for="0s",
    smoke_stale_seconds=3600,
    errors_window="15s",
)


@dataclass(frozen=True)
class TpotSlo:
    """Per-request TPOT objective: `objective` of requests finish with TPOT <= threshold."""

    threshold_seconds: float
    objective: float = 0.99

    @property
    def le(self) -> str:
        # prometheus_client writes bucket bounds with Python's repr of the float ("0.08", "1.0").
        return repr(float(self.threshold_seconds))


@dataclass(frozen=True)
class ScrapeTargets:
    sglang: tuple[str, ...] = ("127.0.0.1:30000",)
    opsctl_exporter: tuple[str, ...] = ("127.0.0.1:9464",)
    pushgateway: tuple[str, ...] = ("127.0.0.1:9091",)
    scrape_interval: str = "15s"
    evaluation_interval: str = "15s"


def itl_buckets(profile: Profile) -> tuple[float, ...]:
    """The ITL/TPOT buckets the profile's server will use: its override, else sglang's default."""
    args = profile.server.extra_args
    for index, arg in enumerate(args):
        if arg == BUCKET_FLAG:
            values: list[str] = []
            for value in args[index + 1:]:
                if value.startswith("--"):
                    break
                values.append(value)
            return tuple(float(v) for v in values)
        if arg.startswith(BUCKET_FLAG + "="):
            return tuple(float(v) for v in re.split(r"[ ,]+", arg.split("=", 1)[1]) if v)
    return SGLANG_ITL_BUCKETS


def tpot_slo(profile: Profile, objective: float = 0.99) -> TpotSlo:
    """The profile's TPOT SLO as a burn-rate objective; it must sit on a histogram bucket edge."""
    if profile.slo.tpot_p50_ms is None:
        raise ProfileError(
            f"profile {profile.name!r} has no slo.tpot_p50_ms",
            hint="set slo.tpot_p50_ms: the TPOT alert needs a threshold",
        )
    threshold = profile.slo.tpot_p50_ms / 1000.0
    buckets = itl_buckets(profile)
    if not any(abs(edge - threshold) < 1e-9 for edge in buckets):
        raise ProfileError(
            f"profile {profile.name!r}: TPOT SLO {threshold:g}s is not an edge of the ITL "
            f"histogram buckets ({', '.join(f'{b:g}' for b in buckets)})",
            hint=f"pick an SLO on a bucket edge, or add `{BUCKET_FLAG} ...` including it to "
            "server.extra_args",
        )
    return TpotSlo(threshold_seconds=threshold, objective=objective)


# --- prometheus.yml --------------------------------------------------------------------------


def prometheus_config(targets: ScrapeTargets, rule_files: list[str]) -> dict[str, Any]:
    return {
        "global": {
            "scrape_interval": targets.scrape_interval,
            "evaluation_interval": targets.evaluation_interval,
        },
        "rule_files": rule_files,
        "scrape_configs": [
            {
                # sglang serves /metrics on its HTTP port with --enable-metrics; every series
                # carries `variant` from --extra-metric-labels, so no target label is added.
                "job_name": "sglang",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": list(targets.sglang)}],
            },
            {
                "job_name": "opsctl",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": list(targets.opsctl_exporter)}],
            },
            {
                # honor_labels keeps the pushed job/profile/variant instead of the gateway's own.
                "job_name": "pushgateway",
                "honor_labels": True,
                "static_configs": [{"targets": list(targets.pushgateway)}],
            },
        ],
    }


# --- recording rules -------------------------------------------------------------------------


def _rate_sum(selector: str, by: str, window: str = RATE_WINDOW) -> str:
    return f"sum by ({by}) (rate({selector}[{window}]))"


def _tpot_rate(suffix: str, matchers: str, by: str, window: str) -> str:
    """Per-request TPOT where sglang exports it, else per-token ITL, decided per variant.

    sglang 0.5.23 has `request_time_per_output_token_seconds`; 0.5.9 (srt/metrics/collector.py)
    has only `inter_token_latency_seconds`, with the same buckets. `or` keeps the TPOT series of
    a variant and takes ITL only for variants without a TPOT histogram (`unless on (variant)`,
    so the two histograms are never mixed bucket by bucket).
    """
    tpot = _rate_sum(sglang(f"{TPOT}{suffix}", matchers), by, window)
    itl = _rate_sum(sglang(f"{ITL}{suffix}", matchers), by, window)
    return f"{tpot}\nor\n(\n  {itl}\n  unless on (variant)\n  {tpot}\n)"


def _indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def _miss_ratio_record(window: str) -> str:
    return f"variant:sglang_tpot_slo_miss:ratio_rate{window}"


def recording_rules(slo: TpotSlo, timing: RuleTiming) -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    histograms = (
        ("tpot", _tpot_rate("_bucket", "", "variant, le", RATE_WINDOW)),
        ("itl", _rate_sum(sglang(f"{ITL}_bucket"), "variant, le")),
        ("ttft", _rate_sum(sglang("time_to_first_token_seconds_bucket"), "variant, le")),
    )
    for short, buckets in histograms:
        for name, q in QUANTILES:
            expr = (f"histogram_quantile({q},\n{_indent(buckets)}\n)" if "\n" in buckets
                    else f"histogram_quantile({q}, {buckets})")
            rules.append({
                "record": f"variant:sglang_{short}_seconds:{name}_rate{RATE_WINDOW}",
                "expr": expr,
            })
    rules += [
        {
            "record": f"variant:sglang_generation_tokens:rate{RATE_WINDOW}",
            "expr": _rate_sum(sglang("generation_tokens_total"), "variant"),
        },
        {
            "record": f"variant:sglang_requests:rate{RATE_WINDOW}",
            "expr": _rate_sum(sglang("num_requests_total"), "variant"),
        },
        {
            "record": f"variant:sglang_aborted_requests:rate{RATE_WINDOW}",
            "expr": _rate_sum(sglang("num_aborted_requests_total"), "variant"),
        },
    ]
    # Error rates over the alert window. Aborted requests carry `variant`; sglang's HTTP status
    # counter does not (it has only endpoint/method/status_code), so it is kept per instance.
    window = timing.errors_window
    aborted = _rate_sum(sglang("num_aborted_requests_total"), "variant", window)
    finished = _rate_sum(sglang("num_requests_total"), "variant", window)
    http_5xx = _rate_sum(sglang("http_responses_total", 'status_code=~"5.."'), "instance", window)
    http_all = _rate_sum(sglang("http_responses_total"), "instance", window)
    rules += [
        {"record": f"variant:sglang_aborted_requests:ratio_rate{window}",
         "expr": f"{aborted}\n/\n{finished}"},
        {"record": f"instance:sglang_http_5xx_responses:ratio_rate{window}",
         "expr": f"{http_5xx}\n/\n{http_all}"},
    ]
    # Fraction of requests (tokens, without a per-request histogram) over the TPOT SLO, one
    # record per burn window.
    windows = sorted(
        {timing.fast_burn.short, timing.fast_burn.long, timing.slow_burn.short,
         timing.slow_burn.long},
        key=_duration_seconds,
    )
    for window in windows:
        good = _tpot_rate("_bucket", f'le="{slo.le}"', "variant", window)
        total = _tpot_rate("_count", "", "variant", window)
        ratio = f"(\n{_indent(good)}\n)\n/\n(\n{_indent(total)}\n)"
        rules.append({
            "record": _miss_ratio_record(window),
            "expr": f"1 - (\n{_indent(ratio)}\n)",
        })
    return {"groups": [{"name": "sglang-recording", "rules": rules}]}


# --- alert rules -----------------------------------------------------------------------------


def _alert(
    name: str, expr: str, for_: str, severity: str, summary: str, description: str
) -> dict[str, Any]:
    anchor = name.lower()
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": f"{RUNBOOK}-{anchor}",
        },
    }


def _burn_expr(slo: TpotSlo, window: BurnWindow) -> str:
    budget = round(1.0 - slo.objective, 6)
    limit = f"{window.factor:g} * {budget:g}"
    return (
        f"{_miss_ratio_record(window.short)} > ({limit})\n"
        f"and\n{_miss_ratio_record(window.long)} > ({limit})"
    )


def alert_rules(slo: TpotSlo, timing: RuleTiming) -> dict[str, Any]:
    threshold_ms = f"{slo.threshold_seconds * 1000:g} ms"
    objective = f"{slo.objective * 100:g}%"
    fast, slow = timing.fast_burn, timing.slow_burn
    sglang_rules = [
        _alert(
            "SglangTpotSloFastBurn", _burn_expr(slo, fast), fast.for_, "critical",
            "Decode is slow: TPOT p{obj} over {thr} for variant {{{{ $labels.variant }}}}".format(
                obj=f"{slo.objective * 100:g}", thr=threshold_ms),
            f"More than {fast.factor:g}x the error budget of the TPOT objective ({objective} of "
            f"requests at or under {threshold_ms}) is burning over both {fast.short} and "
            f"{fast.long}: {{{{ $value | humanizePercentage }}}} of requests miss it.",
        ),
        _alert(
            "SglangTpotSloSlowBurn", _burn_expr(slo, slow), slow.for_, "warning",
            "TPOT p{obj} has been over {thr} for variant {{{{ $labels.variant }}}}".format(
                obj=f"{slo.objective * 100:g}", thr=threshold_ms),
            f"More than {slow.factor:g}x the error budget of the TPOT objective ({objective} of "
            f"requests at or under {threshold_ms}) is burning over both {slow.short} and "
            f"{slow.long}: {{{{ $value | humanizePercentage }}}} of requests miss it.",
        ),
        _alert(
            "SglangServerDown", 'up{job="sglang"} == 0', timing.server_down_for, "critical",
            "sglang server {{ $labels.instance }} is down",
            "Prometheus cannot scrape /metrics of {{ $labels.instance }}: the server is not "
            "serving (crashed, restarting, or still loading weights).",
        ),
        _alert(
            "SglangKvCacheHigh",
            f"max by (variant, instance) ({sglang('token_usage')}) > 0.9",
            timing.kv_cache_for, "warning",
            "KV cache {{ $value | humanizePercentage }} full on {{ $labels.instance }}",
            "sglang:token_usage is above 90% for variant {{ $labels.variant }}: new requests "
            "queue or get retracted, and TPOT and TTFT grow.",
        ),
        _alert(
            "SglangRequestErrors",
            f"variant:sglang_aborted_requests:ratio_rate{timing.errors_window} > 0.05\n"
            f"or\ninstance:sglang_http_5xx_responses:ratio_rate{timing.errors_window} > 0.05",
            timing.errors_for, "warning",
            "More than 5% of requests fail ({{ $labels.variant }}{{ $labels.instance }})",
            "{{ $value | humanizePercentage }} of requests were aborted or answered 5xx over "
            f"{timing.errors_window}.",
        ),
    ]
    opsctl_rules = [
        _alert(
            "OpsctlSmokeFailing", "opsctl_smoke_success == 0", timing.smoke_failing_for,
            "critical",
            "opsctl smoke failed for {{ $labels.profile }}/{{ $labels.variant }}",
            "The last `opsctl smoke` run against this deployment failed; the serving path is "
            "broken or misses its SLO.",
        ),
        _alert(
            "OpsctlSmokeStale",
            "time() - max by (profile, variant) (opsctl_smoke_last_success_timestamp_seconds)"
            f" > {timing.smoke_stale_seconds}",
            "0s", "warning",
            "No successful smoke for {{ $labels.profile }}/{{ $labels.variant }} in "
            f"{_human_seconds(timing.smoke_stale_seconds)}",
            "The last successful `opsctl smoke` is {{ $value | humanizeDuration }} old.",
        ),
    ]
    return {
        "groups": [
            {"name": "sglang-alerts", "rules": sglang_rules},
            {"name": "opsctl-alerts", "rules": opsctl_rules},
        ]
    }


# --- rendering --------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks, so PromQL in the rule files stays readable."""


def _str_representer(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_representer)


def dump_yaml(data: dict[str, Any], header: str) -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False)
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comment + body


RULE_FILES = ("rules/sglang-recording.yml", "rules/alerts.yml")
GENERATED = "Generated by `opsctl monitor render`; do not edit (a test compares it)."


def render_prometheus_files(
    slo: TpotSlo, targets: ScrapeTargets, timing: RuleTiming = PRODUCTION_TIMING
) -> dict[str, str]:
    """Relative path under monitoring/prometheus/ -> file text."""
    slo_line = (f"TPOT objective: {slo.objective * 100:g}% of requests at or under "
                f"{slo.threshold_seconds * 1000:g} ms (bucket le=\"{slo.le}\").")
    return {
        "prometheus.yml": dump_yaml(
            prometheus_config(targets, list(RULE_FILES)),
            f"{GENERATED}\nScrape config for one opsctl deployment on this host (loopback only).",
        ),
        RULE_FILES[0]: dump_yaml(
            recording_rules(slo, timing),
            f"{GENERATED}\nRecording rules by variant from sglang's histograms and counters "
            f"(0.5.23 and 0.5.9 names);\nthe rate window of every `*_rate{RATE_WINDOW}` record "
            f"is {RATE_WINDOW}. TPOT is the per-request histogram where\nsglang has one "
            f"(0.5.23) and the per-token ITL histogram where it has not (0.5.9).\n{slo_line}",
        ),
        RULE_FILES[1]: dump_yaml(
            alert_rules(slo, timing),
            f"{GENERATED}\nAlerts for the sglang server and opsctl's smoke checks; each has a "
            f"runbook in\n{RUNBOOK.split('#')[0]}.\n{slo_line}",
        ),
    }


def _duration_seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    match = re.fullmatch(r"(\d+)([smhd])", text)
    if not match:
        raise ValueError(f"unsupported duration {text!r}")
    return int(match.group(1)) * units[match.group(2)]


def _human_seconds(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"
