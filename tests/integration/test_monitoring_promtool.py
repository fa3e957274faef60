"""promtool on the shipped configuration: config and rules check, and every alert's unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.prometheus

PROMTOOL = shutil.which("promtool")
PROM_DIR = Path(__file__).resolve().parents[2] / "monitoring" / "prometheus"
ALERTS = ("SglangTpotSloFastBurn", "SglangTpotSloSlowBurn", "SglangServerDown",
          "SglangKvCacheHigh", "SglangRequestErrors", "OpsctlSmokeFailing", "OpsctlSmokeStale")


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
    text = (PROM_DIR / "tests" / "alerts.test.yml").read_text()
    shipped = (PROM_DIR / "rules" / "alerts.yml").read_text()
    for alert in ALERTS:
        assert f"alert: {alert}\n" in shipped
        assert f"alertname: {alert}\n" in text, f"no promtool case for {alert}"
