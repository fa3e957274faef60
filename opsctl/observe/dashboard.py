"""The Decode latency Grafana dashboard, built with grafana-foundation-sdk from one panel list.

`PANELS` is the single source of every query: the dashboard JSON is built from it, `opsctl
report` plots its decode-latency panels from the same expressions, and the integration test runs
each of them against a real Prometheus. The committed JSON is this module's output (a test
compares), so it is never edited by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import stat as gstat
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from opsctl.observe import gpu, promconfig
from opsctl.observe.promnames import RATE_WINDOW, sglang

DASHBOARD_UID = "opsctl-decode-latency"
DASHBOARD_TITLE = "Decode latency"
# The provisioned datasource's uid (monitoring/grafana/provisioning/datasources); panels refer to
# it through the `datasource` variable so the dashboard also imports into another Grafana.
DATASOURCE_UID = "opsctl-prometheus"
VARIANT = 'variant=~"$variant"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # or "stat"
    decode_latency: bool = False  # drawn by `opsctl report`
    max_value: float | None = None
    threshold: float | None = None


def _quantiles(record: str) -> tuple[Query, ...]:
    return tuple(
        Query(f"variant:{record}:{q}_rate{RATE_WINDOW}{{{VARIANT}}}", f"{{{{variant}}}} {q}")
        for q in ("p50", "p90", "p99")
    )


PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        "TPOT by variant", "Time per output token, p50/p90/p99 over 5m: per request from "
        "sglang:request_time_per_output_token_seconds (sglang 0.5.23), per token from "
        "sglang:inter_token_latency_seconds where sglang has no per-request histogram (0.5.15).",
        "s", _quantiles("sglang_tpot_seconds"),
        decode_latency=True,
    ),
    PanelSpec(
        "ITL by variant", "Inter-token latency, one observation per token (sglang:inter_token_"
        "latency_seconds): p50, p90, p99 over 5m.", "s", _quantiles("sglang_itl_seconds"),
        decode_latency=True,
    ),
    PanelSpec(
        "TTFT by variant", "Time to first token (sglang:time_to_first_token_seconds).", "s",
        _quantiles("sglang_ttft_seconds"),
    ),
    PanelSpec(
        "Output tokens/s", "Generated tokens per second (rate of sglang:generation_tokens_total).",
        "short",
        (Query(f"variant:sglang_generation_tokens:rate{RATE_WINDOW}{{{VARIANT}}}",
               "{{variant}}"),),
        decode_latency=True,
    ),
    PanelSpec(
        "Requests/s and aborts/s", "Finished and aborted requests per second.", "reqps",
        (Query(f"variant:sglang_requests:rate{RATE_WINDOW}{{{VARIANT}}}", "{{variant}} finished"),
         Query(f"variant:sglang_aborted_requests:rate{RATE_WINDOW}{{{VARIANT}}}",
               "{{variant}} aborted")),
    ),
    PanelSpec(
        "Running and queued requests", "sglang:num_running_reqs and sglang:num_queue_reqs.",
        "short",
        (Query(f"sum by (variant) ({sglang('num_running_reqs', VARIANT)})", "{{variant}} running"),
         Query(f"sum by (variant) ({sglang('num_queue_reqs', VARIANT)})", "{{variant}} queued")),
    ),
    PanelSpec(
        "KV cache usage", "sglang:token_usage: fraction of the KV pool in use (alert at 90%).",
        "percentunit",
        (Query(f"max by (variant) ({sglang('token_usage', VARIANT)})", "{{variant}}"),),
        max_value=1.0, threshold=0.9,
    ),
    PanelSpec(
        "Smoke", "Last opsctl smoke per variant: 1 passed, 0 failed (Pushgateway or exporter).",
        "bool_yes_no",
        (Query(f"max by (profile, variant) (opsctl_smoke_success{{{VARIANT}}})",
               "{{profile}}/{{variant}}"),),
        kind="stat",
    ),
    PanelSpec(
        "Since last successful smoke", "Age of opsctl_smoke_last_success_timestamp_seconds.", "s",
        (Query(f"time() - max by (profile, variant) "
               f"(opsctl_smoke_last_success_timestamp_seconds{{{VARIANT}}})",
               "{{profile}}/{{variant}}"),),
        kind="stat",
    ),
    PanelSpec(
        "Bench: TPOT p50 by concurrency", "opsctl bench results per variant and concurrency.",
        "s",
        (Query(f"max by (variant, concurrency) (opsctl_bench_tpot_p50_seconds{{{VARIANT}}})",
               "{{variant}} c={{concurrency}}"),),
        kind="stat",
    ),
    PanelSpec(
        "Bench: output tokens/s by concurrency", "opsctl bench results per variant and "
        "concurrency.", "short",
        (Query(f"max by (variant, concurrency) "
               f"(opsctl_bench_output_tokens_per_second{{{VARIANT}}})",
               "{{variant}} c={{concurrency}}"),),
        kind="stat",
    ),
)

# The GPU row, from dcgm-exporter (opsctl/observe/gpu.py): per GPU, no variant.
_THROTTLE = "|".join(gpu.THROTTLE_EVENTS)
_FB_USED = "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)"
GPU_PANELS: tuple[PanelSpec, ...] = (
    PanelSpec(
        "GPU temperature",
        "DCGM_FI_DEV_GPU_TEMP per GPU and the lowest slowdown temperature "
        "(DCGM_FI_DEV_SLOWDOWN_TEMP); the alert fires 5 C below it.",
        "celsius",
        (
            Query("max by (gpu) (DCGM_FI_DEV_GPU_TEMP)", "GPU {{gpu}}"),
            Query("min(DCGM_FI_DEV_SLOWDOWN_TEMP)", "slowdown"),
        ),
    ),
    PanelSpec(
        "GPU memory used",
        "Framebuffer used / (used + free) per GPU. sglang reserves most of "
        "it at start (--mem-fraction-static); the alert fires at 98%.",
        "percentunit",
        (Query(f"max by (gpu) ({_FB_USED})", "GPU {{gpu}}"),),
        max_value=1.0,
        threshold=gpu.MEMORY_FULL_RATIO,
    ),
    PanelSpec(
        "GPU throttling",
        "Clock events for heat or a hardware limit within dcgm-exporter's "
        "window (DCGM_EXP_CLOCK_EVENTS_COUNT), per GPU and reason.",
        "short",
        (
            Query(
                "sum by (gpu, clock_event) "
                f'(DCGM_EXP_CLOCK_EVENTS_COUNT{{clock_event=~"{_THROTTLE}"}})',
                "GPU {{gpu}} {{clock_event}}",
            ),
        ),
    ),
    PanelSpec(
        "GPU errors",
        "Last Xid code per GPU (DCGM_FI_DEV_XID_ERRORS, 0: none since the exporter "
        "started) and uncorrectable ECC errors over the last hour.",
        "short",
        (
            Query(
                "max by (gpu, err_msg) (DCGM_FI_DEV_XID_ERRORS)",
                "GPU {{gpu}} last Xid ({{err_msg}})",
            ),
            Query(
                "sum by (gpu) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[1h]))",
                "GPU {{gpu}} ECC DBE 1h",
            ),
        ),
        kind="stat",
    ),
)

# Deploy annotations: a marker where a variant's series first appear (a variant change), from
# sglang itself, and from opsctl's exporter with the image and patch it runs; and each
# `opsctl up --gate` (pushed when it ends), with the variant it gated and its outcome.
ANNOTATIONS: tuple[tuple[str, str, str], ...] = (
    ("Variant started (sglang)", "blue",
     f"group by (variant) ({sglang('num_running_reqs')}) unless "
     f"group by (variant) ({sglang('num_running_reqs')} offset 2m)"),
    ("Deployment changed (opsctl)", "purple",
     "opsctl_deployment_info unless opsctl_deployment_info offset 2m"),
    ("Gate (opsctl up --gate)", "orange",
     "max by (profile, variant, outcome) (opsctl_gate_last_outcome == 1) "
     "and on (profile, variant) (time() - opsctl_gate_timestamp_seconds < 120)"),
)


def _datasource() -> dm.DataSourceRef:
    return dm.DataSourceRef(type_val="prometheus", uid="${datasource}")


def _panel(spec: PanelSpec) -> Any:
    builder: Any = gstat.Panel() if spec.kind == "stat" else gts.Panel()
    builder = (
        builder.title(spec.title).description(spec.description).unit(spec.unit)
        .datasource(_datasource()).height(8).span(12)
    )
    if spec.kind == "timeseries":
        builder = (
            builder.line_width(1).fill_opacity(10)
            .legend(gc.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                    .placement(cm.LegendPlacement.BOTTOM).show_legend(True)
                    .calcs(["lastNotNull", "max"]))
            .tooltip(gc.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI)
                     .sort(cm.SortOrder.DESCENDING))
        )
    else:
        builder = builder.reduce_options(
            gc.ReduceDataOptions().calcs(["lastNotNull"]).values(False)
        ).text_mode(cm.BigValueTextMode.VALUE_AND_NAME)
    if spec.max_value is not None:
        builder = builder.min(0).max(spec.max_value)
    if spec.threshold is not None:
        builder = builder.thresholds(
            gd.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps([
                dm.Threshold(value=None, color="green"),
                dm.Threshold(value=spec.threshold, color="red"),
            ])
        )
    for index, query in enumerate(spec.queries):
        target = (gp.Dataquery().expr(query.expr).legend_format(query.legend)
                  .ref_id(chr(ord("A") + index)))
        target = target.instant() if spec.kind == "stat" else target.range()
        builder = builder.with_target(target)
    return builder


def build_dashboard() -> dict[str, Any]:
    """The dashboard as a JSON-ready dict (what Grafana's file provider loads)."""
    board = (
        gd.Dashboard(DASHBOARD_TITLE).uid(DASHBOARD_UID)
        .tags(["opsctl", "sglang", "glm-5"])
        .description("Decode latency of each sglang variant and whether the service is healthy. "
                     f"{promconfig.GENERATED}")
        .refresh("30s").time("now-1h", "now").timezone("utc").editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .with_variable(
            gd.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .with_variable(
            gd.QueryVariable("variant").label("Variant").datasource(_datasource())
            .query(f"label_values({sglang('num_running_reqs')}, variant)")
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True).include_all(True).all_value(".*")
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
        )
    )
    for name, color, expr in ANNOTATIONS:
        board = board.annotation(
            gd.AnnotationQuery().name(name).datasource(_datasource()).enable(True)
            .icon_color(color).expr(expr)
        )
    rows = (
        ("Decode latency", PANELS[0:2]),
        ("Latency and throughput", PANELS[2:5]),
        ("Load and KV cache", PANELS[5:7]),
        ("opsctl smoke and bench", PANELS[7:]),
        ("GPUs (dcgm-exporter)", GPU_PANELS),
    )
    for title, specs in rows:
        board = board.with_row(gd.Row(title))
        for spec in specs:
            board = board.with_panel(_panel(spec))
    encoded = json.dumps(board.build(), cls=JSONEncoder, sort_keys=True)
    data: dict[str, Any] = json.loads(encoded)
    return data


def dashboard_json() -> str:
    return json.dumps(build_dashboard(), indent=2, sort_keys=True) + "\n"


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, expr) for every panel target, as the dashboard stores them."""
    out: list[tuple[str, str]] = []
    for panel in build_dashboard()["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def decode_latency_panels() -> tuple[PanelSpec, ...]:
    return tuple(spec for spec in PANELS if spec.decode_latency)
