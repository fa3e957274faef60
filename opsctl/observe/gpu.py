"""GPU health from NVIDIA's dcgm-exporter: the counters opsctl asks it for, and the GPU alerts.

dcgm-exporter (pinned in monitoring/images.yaml, 4.5.3-4.8.2) exports the DCGM fields listed in
a CSV file, one `FIELD, type, help` line each, as Prometheus series named after the field with
the labels `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname` (see its
internal/pkg/rendermetrics/render_metrics.go). Its default list (etc/default-counters.csv at
that tag) leaves out ECC, row-remap-pending, the slowdown temperature and the clock-event
counter, so opsctl ships its own list, rendered here into monitoring/dcgm-exporter/counters.csv.
Every field name below is in that default list (enabled or commented out) or in go-dcgm's
field table at the commit the exporter pins (pkg/dcgm/const_fields.go, go-dcgm ec245c09fe3e):
an unknown name stops the exporter at start-up.

`DCGM_FI_DEV_XID_ERRORS` holds the code of the *last* Xid and never returns to 0 until the
exporter restarts (NVIDIA/DCGM#277, NVIDIA/dcgm-exporter#500), and a repeat of the same code does
not change it (dcgm-exporter#190). The exporter also puts the code in labels (`err_code`,
`err_msg`: gpu_collector.go), so a new code is a new series. The Xid alert therefore fires on
`DCGM_EXP_XID_ERRORS_COUNT` (Xids in the exporter's window, by code; dcgm-exporter#239) or on a
last-code series that did not exist `ERROR_WINDOW` ago, never on the sticky value. Profiling
(`DCGM_FI_PROF_*`) fields are left out: they need CAP_SYS_ADMIN, which the container is not given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opsctl.engine.api import Mount, RunSpec
from opsctl.observe.promexpr import RuleTiming, alert

COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (C)."),
    ("DCGM_FI_DEV_SLOWDOWN_TEMP", "gauge", "Temperature at which the GPU slows its clocks (C)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock (MHz)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (%)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (MiB)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Code of the last Xid error."),
    (
        "DCGM_EXP_XID_ERRORS_COUNT",
        "gauge",
        "Xid errors within the exporter's window by code (label xid).",
    ),
    (
        "DCGM_EXP_CLOCK_EVENTS_COUNT",
        "gauge",
        "Clock events (throttle reasons) within the exporter's window by clock_event.",
    ),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for correctable errors."),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Rows remapped for uncorrectable errors.",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "1 if remapped rows wait for a GPU reset."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "1 if a row remapping failed."),
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver version."),
)
# dcgm-exporter's names of the clock-event bits (internal/pkg/collector/clock_events_collector.go)
# that mean the GPU is slowed down by heat or a hardware limit. Left out: gpu_idle,
# clocks_setting, sync_boost, display_clocks and power_cap (a board at its power limit under
# load is working as designed; the slowdown shows in TPOT).
THROTTLE_EVENTS = ("sw_thermal", "hw_thermal", "hw_slowdown", "hw_power_brake")
JOB = "dcgm"
PORT = 9400
COUNTERS_FILE = "dcgm-exporter/counters.csv"
TEMPERATURE_MARGIN_C = 5
MEMORY_FULL_RATIO = 0.98
ERROR_WINDOW = "10m"
BY = "instance, gpu"


def counters_csv(header: str) -> str:
    """The counters file dcgm-exporter reads with `-f` (Go's csv reader: exactly three fields,
    so no comma inside a help text)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines.append("# DCGM field, Prometheus type, help")
    lines += [f"{name}, {kind}, {text}" for name, kind, text in COUNTERS]
    return "\n".join(lines) + "\n"


def run_spec(image: str, config_dir: Path, gpus: list[int], labels: dict[str, str],
             grace: int) -> RunSpec:
    """dcgm-exporter on 127.0.0.1 only, watching the profile's GPUs, reading opsctl's counters."""
    return RunSpec(
        image=image, name="opsctl-dcgm-exporter", labels=labels,
        command=["-f", f"/etc/opsctl/{COUNTERS_FILE}", "-a", f"127.0.0.1:{PORT}"],
        mounts=[Mount(str(config_dir / "dcgm-exporter"), "/etc/opsctl/dcgm-exporter",
                      read_only=True)],
        gpus=list(gpus), network_mode="host", stop_grace_seconds=grace,
    )


def _max(expr: str) -> str:
    return f"max by ({BY}) ({expr})"


def alert_rules(timing: RuleTiming) -> list[dict[str, Any]]:
    where = "GPU {{ $labels.gpu }} on {{ $labels.instance }}"
    events = "|".join(THROTTLE_EVENTS)
    return [
        alert(
            "GpuXidErrors",
            f"{_max('DCGM_EXP_XID_ERRORS_COUNT')} > 0\nor\n"
            + _max(
                f"DCGM_FI_DEV_XID_ERRORS > 0\n  unless DCGM_FI_DEV_XID_ERRORS offset {ERROR_WINDOW}"
            ),
            "0s",
            "critical",
            f"{where} reported an Xid error",
            "The NVIDIA driver reported an Xid error on this GPU in the last "
            f"{ERROR_WINDOW} (DCGM_FI_DEV_XID_ERRORS holds the last code). Some codes mean the "
            "GPU has fallen off the bus or needs a reset; sglang usually stalls or exits.",
        ),
        alert(
            "GpuTemperatureHigh",
            f"{_max('DCGM_FI_DEV_GPU_TEMP')}\n>= on ({BY})\n"
            f"{_max('DCGM_FI_DEV_SLOWDOWN_TEMP')} - {TEMPERATURE_MARGIN_C}",
            timing.gpu_for,
            "warning",
            f"{where} is {{{{ $value }}}} C, near its slowdown",
            f"The GPU is within {TEMPERATURE_MARGIN_C} C of the temperature at which it cuts its "
            "clocks (DCGM_FI_DEV_SLOWDOWN_TEMP): decode slows down, and a board kept that hot "
            "may hang.",
        ),
        alert(
            "GpuClockThrottled",
            f"max by ({BY}, clock_event) "
            f'(DCGM_EXP_CLOCK_EVENTS_COUNT{{clock_event=~"{events}"}}) > 0',
            timing.gpu_for,
            "warning",
            f"{where} is throttled ({{{{ $labels.clock_event }}}})",
            "The GPU lowered its clocks for heat or a hardware limit "
            "(clock_event {{ $labels.clock_event }}): every token takes longer on this GPU, and "
            "tensor parallelism waits for the slowest one.",
        ),
        alert(
            "GpuMemoryErrors",
            f"{_max(f'increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[{ERROR_WINDOW}])')} > 0\nor\n"
            f"{_max(f'increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[{ERROR_WINDOW}])')} > 0"
            f"\nor\n{_max('DCGM_FI_DEV_ROW_REMAP_FAILURE')} > 0",
            "0s",
            "critical",
            f"{where} has uncorrectable memory errors",
            "Uncorrectable (double-bit) ECC errors, rows remapped for uncorrectable errors, or a "
            "failed row remapping: data in GPU memory was lost, results may be wrong, and the "
            "GPU needs a reset or replacement.",
        ),
        alert(
            "GpuRowRemapPending",
            f"{_max('DCGM_FI_DEV_ROW_REMAP_PENDING')} > 0",
            timing.gpu_for,
            "warning",
            f"{where} waits for a reset to remap memory rows",
            "The GPU remapped memory rows that take effect only after a GPU reset: plan one "
            "(it restarts the server).",
        ),
        alert(
            "GpuMemoryNearFull",
            f"{_max('DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)')} > "
            f"{MEMORY_FULL_RATIO:g}",
            timing.gpu_for,
            "warning",
            f"{where} memory is {{{{ $value | humanizePercentage }}}} full",
            f"More than {MEMORY_FULL_RATIO:.0%} of the GPU's memory is in use. sglang reserves "
            "--mem-fraction-static of it at start, so this is what is left for activations and "
            "CUDA graphs: a longer prompt or a new batch size can fail with out-of-memory.",
        ),
        alert(
            "GpuExporterDown",
            f'up{{job="{JOB}"}} == 0',
            timing.gpu_for,
            "warning",
            "dcgm-exporter {{ $labels.instance }} is down",
            "Prometheus cannot scrape dcgm-exporter, so no GPU alert can fire.",
        ),
    ]
