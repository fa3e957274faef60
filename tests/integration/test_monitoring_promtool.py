"""promtool on the shipped configuration: config and rules check, and every alert's unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.prometheus

PROMTOOL = shutil.which("promtool")
PROM_DIR = Path(__file__).resolve().parents[2] / "monitoring" / "prometheus"
ALERTS = ("SglangTpotSloFastBurn", "SglangTpotSloSlowBurn", "SglangTtftSloFastBurn",
          "SglangTtftSloSlowBurn", "SglangServerDown", "SglangDecodeStalled", "SglangKvCacheHigh",
          "SglangKvCachePressure", "SglangRequestErrors", "SglangServerRestarting",
          "SglangServerCrashLooping", "SglangHealthCheckFailing", "OpsctlSmokeFailing",
          "OpsctlSmokeStale", "GpuXidErrors", "GpuTemperatureHigh", "GpuClockThrottled",
          "GpuMemoryErrors", "GpuRowRemapPending", "GpuMemoryNearFull", "GpuExporterDown")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if PROMTOOL is None:
        pytest.skip("needs promtool (Debian package `prometheus`)")
    return subprocess.run([PROMTOOL, *args], cwd=PROM_DIR, capture_output=True, text=True,
                          timeout=120, check=False)


def test_check_config_passes() -> None:
    result = _promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_rules_passes() -> None:
    rules = sorted(str(p.relative_to(PROM_DIR)) for p in (PROM_DIR / "rules").glob("*.yml"))
    result = _promtool("check", "rules", *rules)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_pass() -> None:
    tests = sorted(str(p.relative_to(PROM_DIR)) for p in (PROM_DIR / "tests").glob("*.test.yml"))
    result = _promtool("test", "rules", *tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_case() -> None:
    cases = [yaml.safe_load(p.read_text()) for p in (PROM_DIR / "tests").glob("*.test.yml")]
    firing = {check["alertname"] for doc in cases for test in doc["tests"]
              for check in test.get("alert_rule_test", []) if check["exp_alerts"]}
    shipped = yaml.safe_load((PROM_DIR / "rules" / "alerts.yml").read_text())
    names = {rule["alert"] for group in shipped["groups"] for rule in group["rules"]}
    assert names == set(ALERTS)
    assert set(ALERTS) - firing == set(), "alerts without a promtool case that fires them"
