"""Prometheus recording and alert rules for sglang, opsctl and the GPUs, as data ready to dump.

The SLO rules come from `promslo` (the profile's objectives), the GPU alerts from `gpu`
(dcgm-exporter); the rest is here. Timings and PromQL helpers live in `promexpr`.
"""

from __future__ import annotations

from typing import Any

from opsctl.observe import gpu, promslo
from opsctl.observe.promexpr import (
    PRODUCTION_TIMING,
    RuleTiming,
    alert,
    indent,
    rate_sum,
    tpot_rate,
)
from opsctl.observe.promnames import ITL, QUANTILES, RATE_WINDOW, SloRule, sglang

__all__ = ["PRODUCTION_TIMING", "RuleTiming", "alert_rules", "recording_rules"]
BY = "variant, instance"


# --- recording rules -------------------------------------------------------------------------


def recording_rules(slos: tuple[SloRule, ...], timing: RuleTiming) -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    histograms = (
        ("tpot", tpot_rate("_bucket", "", "variant, le", RATE_WINDOW)),
        ("itl", rate_sum(sglang(f"{ITL}_bucket"), "variant, le", RATE_WINDOW)),
        ("ttft", rate_sum(sglang("time_to_first_token_seconds_bucket"), "variant, le",
                          RATE_WINDOW)),
    )
    for short, buckets in histograms:
        for name, q in QUANTILES:
            expr = (f"histogram_quantile({q},\n{indent(buckets)}\n)" if "\n" in buckets
                    else f"histogram_quantile({q}, {buckets})")
            rules.append({
                "record": f"variant:sglang_{short}_seconds:{name}_rate{RATE_WINDOW}",
                "expr": expr,
            })
    for record, series in (("generation_tokens", "generation_tokens_total"),
                           ("requests", "num_requests_total"),
                           ("aborted_requests", "num_aborted_requests_total")):
        rules.append({"record": f"variant:sglang_{record}:rate{RATE_WINDOW}",
                      "expr": rate_sum(sglang(series), "variant", RATE_WINDOW)})
    # Error rates over the alert window. Aborted requests carry `variant`; sglang's HTTP status
    # counter does not (it has only endpoint/method/status_code), so it is kept per instance.
    window = timing.errors_window
    aborted = rate_sum(sglang("num_aborted_requests_total"), "variant", window)
    finished = rate_sum(sglang("num_requests_total"), "variant", window)
    http_5xx = rate_sum(sglang("http_responses_total", 'status_code=~"5.."'), "instance", window)
    http_all = rate_sum(sglang("http_responses_total"), "instance", window)
    rules += [
        {"record": f"variant:sglang_aborted_requests:ratio_rate{window}",
         "expr": f"{aborted}\n/\n{finished}"},
        {"record": f"instance:sglang_http_5xx_responses:ratio_rate{window}",
         "expr": f"{http_5xx}\n/\n{http_all}"},
    ]
    rules += promslo.recording_rules(slos, timing)
    return {"groups": [{"name": "sglang-recording", "rules": rules}]}


# --- alert rules -----------------------------------------------------------------------------


def _sglang_alerts(timing: RuleTiming) -> list[dict[str, Any]]:
    where = "variant {{ $labels.variant }} on {{ $labels.instance }}"
    # sglang counts decode tokens at every decode step in realtime_tokens_total{mode="decode"}
    # (0.5.23 scheduler_components/metrics_reporter.py report_decode_stats); generation_tokens_total
    # only moves when a request finishes, so it would call a long request a stall.
    running = f"sum by ({BY}) ({sglang('num_running_reqs')})"
    decoded = rate_sum(sglang("realtime_tokens_total", 'mode="decode"'), BY, timing.stall_window)
    queued = f"sum by ({BY}) ({sglang('num_queue_reqs')})"
    usage = f"max by ({BY}) ({sglang('token_usage')})"
    return [
        alert(
            "SglangServerDown", 'up{job="sglang"} == 0', timing.server_down_for, "critical",
            "sglang server {{ $labels.instance }} is down",
            "Prometheus cannot scrape /metrics of {{ $labels.instance }}: the server is not "
            "serving (crashed, restarting, or still loading weights).",
        ),
        alert(
            "SglangDecodeStalled", f"{running} > 0\nunless on ({BY})\n{decoded} > 0",
            timing.stall_for, "critical", f"Decode is stalled for {where}",
            f"{{{{ $value }}}} requests are running but sglang generated no token in the last "
            f"{timing.stall_window}: the scheduler or a GPU is hung while /metrics still "
            "answers. Clients wait until they time out.",
        ),
        alert(
            "SglangKvCacheHigh", f"{usage} > 0.9", timing.kv_cache_for, "warning",
            "KV cache {{ $value | humanizePercentage }} full on {{ $labels.instance }}",
            "sglang:token_usage is above 90% for variant {{ $labels.variant }}: new requests "
            "queue or get retracted, and TPOT and TTFT grow.",
        ),
        alert(
            "SglangKvCachePressure", f"{usage} > 0.9\nand on ({BY})\n{queued} > 0",
            timing.kv_pressure_for, "warning",
            f"KV cache {{{{ $value | humanizePercentage }}}} full with requests queueing for "
            f"{where}",
            "The KV pool is over 90% full and requests wait in sglang's queue "
            "(sglang:num_queue_reqs > 0): users see their first token late because there is no "
            "room to start their requests.",
        ),
        alert(
            "SglangRequestErrors",
            f"variant:sglang_aborted_requests:ratio_rate{timing.errors_window} > 0.05\n"
            f"or\ninstance:sglang_http_5xx_responses:ratio_rate{timing.errors_window} > 0.05",
            timing.errors_for, "warning",
            "More than 5% of requests fail ({{ $labels.variant }}{{ $labels.instance }})",
            "{{ $value | humanizePercentage }} of requests were aborted or answered 5xx over "
            f"{timing.errors_window}.",
        ),
    ]


def _opsctl_alerts(timing: RuleTiming) -> list[dict[str, Any]]:
    where = "{{ $labels.profile }}/{{ $labels.variant }}"
    restarts = "opsctl_server_restarts_total"
    return [
        alert(
            "SglangServerRestarting", f"increase({restarts}[{timing.restart_window}]) > 0",
            "0s", "warning", f"The sglang server of {where} restarted",
            f"Docker restarted the server container in the last {timing.restart_window} "
            "(its restart policy acted on an exit): requests in flight were lost and the model "
            "loads again.",
        ),
        alert(
            "SglangServerCrashLooping",
            f"increase({restarts}[{timing.crash_loop_window}]) >= 3",
            "0s", "critical", f"The sglang server of {where} is crash-looping",
            f"The server container restarted {{{{ $value | printf \"%.0f\" }}}} times in "
            f"{timing.crash_loop_window}: it exits again after every start, so it never serves.",
        ),
        alert(
            "SglangHealthCheckFailing", "opsctl_server_healthy == 0", timing.health_for,
            "critical", f"The sglang server of {where} fails its health check",
            "Docker's health check of the server container fails (sglang's /health answers "
            "503 or not at all): the server is up but cannot generate.",
        ),
        alert(
            "OpsctlSmokeFailing", "opsctl_smoke_success == 0", timing.smoke_failing_for,
            "critical", f"opsctl smoke failed for {where}",
            "The last `opsctl smoke` run against this deployment failed; the serving path is "
            "broken or misses its SLO.",
        ),
        alert(
            "OpsctlSmokeStale",
            "time() - max by (profile, variant) (opsctl_smoke_last_success_timestamp_seconds)"
            f" > {timing.smoke_stale_seconds}",
            "0s", "warning",
            f"No successful smoke for {where} in {timing.smoke_stale_seconds // 3600}h",
            "The last successful `opsctl smoke` is {{ $value | humanizeDuration }} old.",
        ),
    ]


def alert_rules(slos: tuple[SloRule, ...], timing: RuleTiming) -> dict[str, Any]:
    return {
        "groups": [
            {"name": "sglang-alerts",
             "rules": promslo.alert_rules(slos, timing) + _sglang_alerts(timing)},
            {"name": "opsctl-alerts", "rules": _opsctl_alerts(timing)},
            {"name": "gpu-alerts", "rules": gpu.alert_rules(timing)},
        ]
    }
