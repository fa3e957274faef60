"""Rendering of monitoring/: committed files equal the generated ones; rules, dashboard and
container specs keep their contracts (both sglang prefixes, loopback only, pinned images)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from ruletiming import TEST_TIMING

from opsctl.config.profiles import Profile, load_profile
from opsctl.config.sloconfig import Slo
from opsctl.core.errors import ProfileError
from opsctl.core.paths import project_root
from opsctl.observe import dashboard, monitoring, promconfig, promrules, view
from opsctl.observe.promnames import slo_rules

MONITORING = project_root() / "monitoring"
SHIPPED_SLOS = slo_rules(load_profile(monitoring.SHIPPED_PROFILE))


def test_committed_monitoring_files_equal_the_generated_ones() -> None:
    files = monitoring.render_for_profile(load_profile(monitoring.SHIPPED_PROFILE))
    stale = [path for path, text in files.items() if (MONITORING / path).read_text() != text]
    assert stale == [], "run `opsctl monitor render` and commit the result"


def _rule_exprs() -> list[str]:
    files = promconfig.render_prometheus_files(SHIPPED_SLOS, promconfig.ScrapeTargets())
    exprs = []
    for name in promconfig.RULE_FILES:
        for group in yaml.safe_load(files[name])["groups"]:
            exprs += [rule["expr"] for rule in group["rules"]]
    return exprs


def test_every_sglang_selector_matches_both_prefixes() -> None:
    exprs = _rule_exprs() + [expr for _, expr in dashboard.panel_queries()]
    for expr in exprs:
        # A bare `sglang:` or `sglang_` name would miss the other spelling.
        assert not re.search(r"(?<![\w\[:])sglang[:_][a-z]", expr), expr


def _with_slo(profile: Profile, **slo: object) -> Profile:
    return profile.model_copy(update={"slo": Slo.model_validate(slo)})


def test_slo_thresholds_must_sit_on_bucket_edges() -> None:
    profile = load_profile("sim")
    assert [(r.name, r.le, r.quantile, r.target) for r in slo_rules(profile)] == [
        ("tpot", "0.06", 0.5, 0.99), ("ttft", "0.6", 0.5, 0.99)]
    odd = _with_slo(profile, tpot={"quantile": 0.5, "threshold_ms": 50})
    with pytest.raises(ProfileError, match="slo.tpot.threshold_ms 50 is not an edge"):
        slo_rules(odd)
    custom = odd.model_copy(update={"server": odd.server.model_copy(update={
        "extra_args": ["--bucket-inter-token-latency", "0.025", "0.05", "0.1"]})})
    assert slo_rules(custom)[0].le == "0.05"
    with pytest.raises(ProfileError, match="slo.ttft.threshold_ms 500 is not an edge"):
        slo_rules(_with_slo(profile, ttft={"quantile": 0.9, "threshold_ms": 500}))
    # Objectives with only a quantile and a threshold take the default target and window.
    short = _with_slo(profile, tpot={"quantile": 0.5, "threshold_ms": 80},
                      ttft={"quantile": 0.5, "threshold_ms": 2000})
    assert [(r.name, r.le, r.quantile, r.window_seconds) for r in slo_rules(short)] == [
        ("tpot", "0.08", 0.5, 30 * 86400), ("ttft", "2.0", 0.5, 30 * 86400)]
    assert slo_rules(_with_slo(profile)) == ()


def test_a_target_a_burn_rate_cannot_reach_is_refused() -> None:
    # 14.4 x (1 - 0.9) > 1: no share of the time can burn that fast, so the alert could never fire.
    rules = slo_rules(_with_slo(load_profile("sim"),
                                tpot={"quantile": 0.5, "threshold_ms": 60, "target": 0.9}))
    with pytest.raises(ProfileError, match="can never exceed"):
        promrules.alert_rules(rules, promrules.PRODUCTION_TIMING)


def test_burn_factors_follow_the_objective_window() -> None:
    week = slo_rules(_with_slo(load_profile("sim"), tpot={
        "quantile": 0.5, "threshold_ms": 60, "target": 0.99, "window": "7d"}))
    rules = promrules.alert_rules(week, promrules.PRODUCTION_TIMING)["groups"][0]["rules"]
    # 2% of a week's budget in 1 h and 5% in 6 h (30 days give the workbook's 14.4 and 6).
    assert "(3.36 * 0.01)" in rules[0]["expr"] and "(1.4 * 0.01)" in rules[1]["expr"]


def test_test_timing_only_shortens_windows() -> None:
    prod = promrules.alert_rules(SHIPPED_SLOS, promrules.PRODUCTION_TIMING)
    fast = promrules.alert_rules(SHIPPED_SLOS, TEST_TIMING)
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
    gpu_titles = {spec.title for spec in dashboard.GPU_PANELS}
    assert gpu_titles <= titles
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["fieldConfig"]["defaults"]["unit"]
        for target in panel["targets"]:
            # sglang panels follow the variant picker; GPU panels are per GPU, with no variant.
            assert ('$variant' in target["expr"]) != (panel["title"] in gpu_titles)
    assert len(board["annotations"]["list"]) == 3  # variant started, deployment changed, gate


def test_monitor_dry_run_binds_loopback_and_pins_images(tmp_path: Path) -> None:
    result = monitoring.plan(load_profile("sim"), tmp_path, create_secrets=False)
    images = monitoring.load_images()
    # The sim profile has no GPU: no dcgm-exporter.
    assert [s.image for s in result.specs] == [images.prometheus, images.pushgateway,
                                               images.alertmanager, images.grafana]
    for spec in result.specs:
        assert spec.network_mode == "host" and spec.ports == []
        assert spec.labels["opsctl.role"] == "monitoring"
    argv = " ".join(result.specs[0].command + result.specs[1].command)
    assert "--web.listen-address=127.0.0.1:9090" in argv
    assert "--web.listen-address=127.0.0.1:9091" in argv
    assert "--web.listen-address=127.0.0.1:9093" in result.specs[2].command
    assert "--cluster.listen-address=" in result.specs[2].command  # no gossip on 0.0.0.0:9094
    assert result.specs[3].env["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    text = view.dry_run_text(result)
    # The password is a mounted file: only its path is in the plan, never a value.
    assert f"GF_SECURITY_ADMIN_PASSWORD__FILE={monitoring.GRAFANA_PASSWORD_MOUNT}" in text
    assert "GF_SECURITY_ADMIN_PASSWORD=" not in text
    assert "unresolved" in text or "sha256:" in text
    # The rendered scrape config targets the profile's published sglang port.
    config = yaml.safe_load(result.files["prometheus/prometheus.yml"])
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == ["127.0.0.1:30000"]


def test_grafana_password_is_generated_once_and_private(tmp_path: Path) -> None:
    path = monitoring.ensure_grafana_password(tmp_path)
    first = path.read_text()
    assert monitoring.ensure_grafana_password(tmp_path).read_text() == first
    assert first.strip() not in {"", "admin"}
    # Readable by Grafana's uid through the mount; no other host user can reach its folder.
    assert path.parent.stat().st_mode & 0o077 == 0
