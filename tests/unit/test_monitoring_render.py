"""Rendering of monitoring/: committed files equal the generated ones; rules, dashboard and
container specs keep their contracts (both sglang prefixes, loopback only, pinned images)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from opsctl.core.errors import ProfileError
from opsctl.core.paths import project_root
from opsctl.deploy.profiles import load_profile
from opsctl.observe import dashboard, monitoring
from opsctl.observe import promconfig as prom_config

MONITORING = project_root() / "monitoring"


def test_committed_monitoring_files_equal_the_generated_ones() -> None:
    files = monitoring.render_for_profile(load_profile(monitoring.SHIPPED_PROFILE))
    stale = [path for path, text in files.items() if (MONITORING / path).read_text() != text]
    assert stale == [], "run `opsctl monitor render` and commit the result"


def _rule_exprs() -> list[str]:
    files = prom_config.render_prometheus_files(
        prom_config.TpotSlo(0.08), prom_config.ScrapeTargets())
    exprs = []
    for name in prom_config.RULE_FILES:
        for group in yaml.safe_load(files[name])["groups"]:
            exprs += [rule["expr"] for rule in group["rules"]]
    return exprs


def test_every_sglang_selector_matches_both_prefixes() -> None:
    exprs = _rule_exprs() + [expr for _, expr in dashboard.panel_queries()]
    for expr in exprs:
        # A bare `sglang:` or `sglang_` name would miss the other spelling.
        assert not re.search(r"(?<![\w\[:])sglang[:_][a-z]", expr), expr


def test_tpot_slo_must_sit_on_a_bucket_edge() -> None:
    profile = load_profile("sim")
    assert prom_config.tpot_slo(profile).le == "0.06"
    odd = profile.model_copy(update={"slo": profile.slo.model_copy(update={"tpot_p50_ms": 50})})
    with pytest.raises(ProfileError, match="not an edge"):
        prom_config.tpot_slo(odd)
    custom = odd.model_copy(update={"server": odd.server.model_copy(update={
        "extra_args": ["--bucket-inter-token-latency", "0.025", "0.05", "0.1"]})})
    assert prom_config.tpot_slo(custom).le == "0.05"


def test_test_timing_only_shortens_windows() -> None:
    slo = prom_config.TpotSlo(0.06)
    prod = prom_config.alert_rules(slo, prom_config.PRODUCTION_TIMING)
    fast = prom_config.alert_rules(slo, prom_config.TEST_TIMING)
    names = [[r["alert"] for r in g["rules"]] for g in prod["groups"]]
    assert names == [[r["alert"] for r in g["rules"]] for g in fast["groups"]]
    for group in prod["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in {"critical", "warning"}
            assert rule["annotations"]["runbook_url"].startswith("docs/observability.md#")


def test_dashboard_json_is_built_by_the_sdk_with_a_variant_variable() -> None:
    board = json.loads((MONITORING / "grafana" / monitoring.DASHBOARD_FILE).read_text())
    assert board == dashboard.build_dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["variant"]["includeAll"] and variables["variant"]["multi"]
    assert variables["datasource"]["type"] == "datasource"
    panels = [p for p in board["panels"] if p["type"] != "row"]
    titles = {p["title"] for p in panels}
    assert {"TPOT by variant", "ITL by variant", "TTFT by variant", "Output tokens/s",
            "Running and queued requests", "KV cache usage", "Smoke"} <= titles
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["fieldConfig"]["defaults"]["unit"]
        for target in panel["targets"]:
            assert '$variant' in target["expr"]
    assert len(board["annotations"]["list"]) == 2


def test_monitor_dry_run_binds_loopback_and_pins_images(tmp_path: Path) -> None:
    result = monitoring.plan(load_profile("sim"), tmp_path, create_secrets=False)
    images = monitoring.load_images()
    assert [s.image for s in result.specs] == [images.prometheus, images.pushgateway,
                                               images.grafana]
    for spec in result.specs:
        assert spec.network_mode == "host" and spec.ports == []
        assert spec.labels["opsctl.role"] == "monitoring"
    argv = " ".join(result.specs[0].command + result.specs[1].command)
    assert "--web.listen-address=127.0.0.1:9090" in argv
    assert "--web.listen-address=127.0.0.1:9091" in argv
    assert result.specs[2].env["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    text = monitoring.dry_run_text(result)
    assert "GF_SECURITY_ADMIN_PASSWORD=****" in text
    assert "unresolved" in text or "sha256:" in text
    # The rendered scrape config targets the profile's published sglang port.
    config = yaml.safe_load(result.files["prometheus/prometheus.yml"])
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == ["127.0.0.1:30000"]


def test_grafana_password_is_generated_once_and_private(tmp_path: Path) -> None:
    first = monitoring.grafana_password(tmp_path, create=True)
    assert first == monitoring.grafana_password(tmp_path, create=True)
    assert first != "admin"
    assert (tmp_path / monitoring.GRAFANA_PASSWORD_FILE).stat().st_mode & 0o077 == 0
