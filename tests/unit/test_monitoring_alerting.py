"""Where alerts go (Alertmanager's routing, inhibition, the user's receivers) and what feeds the
new alerts (dcgm-exporter's counters file, Prometheus' alerting section, the exporter's
restart and health series)."""

from __future__ import annotations

import csv
import functools
import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from opsctl.config.profiles import load_profile
from opsctl.core.errors import OpsctlError, ProfileError
from opsctl.core.paths import project_root
from opsctl.engine.api import ContainerInfo
from opsctl.observe import alertmanager, gpu, monitoring, promrules, servers
from opsctl.observe.promnames import slo_rules

MONITORING = project_root() / "monitoring"


@functools.cache
def _shipped_rules() -> dict[str, Any]:
    """The shipped profile's alert rules, built once for the module (they are pure)."""
    return promrules.alert_rules(slo_rules(load_profile(monitoring.SHIPPED_PROFILE)),
                                 promrules.PRODUCTION_TIMING)


def _alert_names() -> set[str]:
    rules = _shipped_rules()
    return {rule["alert"] for group in rules["groups"] for rule in group["rules"]}


def _labels_of(name: str) -> set[str]:
    """Labels an alert can carry: its own plus those its expression keeps (by/on clauses; an
    expression without them keeps the target's job and instance and opsctl's profile, variant)."""
    rules = _shipped_rules()
    rule = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == name)
    kept = set(re.findall(r"\b(?:by|on) \(([^)]*)\)", rule["expr"]))
    if not kept:
        return {"job", "instance", "profile", "variant"} | set(rule["labels"])
    return {label.strip() for group in kept for label in group.split(",")} | set(rule["labels"])


def test_routing_sends_critical_and_warning_to_their_receivers_grouped_by_deployment() -> None:
    config = alertmanager.config(alertmanager.load_receivers())
    route = config["route"]
    assert route["group_by"] == ["alertname", "profile", "variant"]
    assert route["receiver"] == "warning"
    assert [(r["matchers"], r["receiver"]) for r in route["routes"]] == [
        (['severity="critical"'], "critical"), (['severity="warning"'], "warning")]
    severities = {r["labels"]["severity"] for g in promrules.alert_rules(
        (), promrules.PRODUCTION_TIMING)["groups"] for r in g["rules"]}
    assert severities == {"critical", "warning"}  # every alert has a route


def test_every_inhibition_names_real_alerts_and_labels_they_carry() -> None:
    names = _alert_names()
    for rule in alertmanager.INHIBIT_RULES:
        for side in ("source_matchers", "target_matchers"):
            matcher = rule[side][0]
            pattern = matcher.split("=", 1)[1].lstrip("~").strip('"')
            matched = {name for name in names if re.fullmatch(pattern, name)}
            assert matched, f"{matcher} matches no alert"
            for name in matched:
                assert set(rule["equal"]) <= _labels_of(name), (name, rule["equal"])
    # The one the issue asks for: a down server silences its latency and stall alerts.
    down = alertmanager.INHIBIT_RULES[0]
    assert down["source_matchers"] == ['alertname="SglangServerDown"']
    assert down["equal"] == ["instance"]
    target = down["target_matchers"][0].split("=~", 1)[1].strip('"')
    assert {"SglangTpotSloFastBurn", "SglangTtftSloSlowBurn", "SglangDecodeStalled"} <= {
        name for name in names if re.fullmatch(target, name)}


def test_the_committed_config_is_the_shipped_receivers_with_opsctl_routing() -> None:
    committed = yaml.safe_load((MONITORING / alertmanager.CONFIG_FILE).read_text())
    assert committed == alertmanager.config(alertmanager.load_receivers())
    assert [r["name"] for r in committed["receivers"]] == ["critical", "warning"]


def _receivers(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "receivers.yml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "message"), [
    ("receivers:\n- name: critical\n", "no receiver named warning"),
    ("route: {receiver: x}\nreceivers: []\n", "unknown top-level key"),
    ("- name: critical\n", "needs a `receivers:` list"),
    ("receivers: [\n", "cannot read receivers file"),
    ("global:\n  smtp_auth_password: hunter2\nreceivers:\n- name: critical\n- name: warning\n",
     "global.smtp_auth_password holds a secret inline"),
    ("receivers:\n- name: critical\n  slack_configs:\n  - api_url: https://hooks.example/x\n"
     "- name: warning\n", "receivers.slack_configs.api_url holds a secret inline"),
    ("receivers:\n- name: critical\n  webhook_configs:\n  - url: https://a.example\n"
     "    http_config: {authorization: {credentials: abc}}\n- name: warning\n",
     "credentials holds a secret inline"),
])
def test_a_bad_receivers_file_is_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)) as error:
        alertmanager.load_receivers(_receivers(tmp_path, text))
    assert "hunter2" not in str(error.value)


def test_secrets_from_files_are_accepted_and_integrations_counted(tmp_path: Path) -> None:
    doc = alertmanager.load_receivers(_receivers(tmp_path, (
        "global:\n  smtp_auth_password_file: /etc/alertmanager/secrets/smtp\n"
        "receivers:\n- name: critical\n  slack_configs:\n"
        "  - api_url_file: /etc/alertmanager/secrets/slack\n    channel: '#ops'\n"
        "- name: warning\n- name: spare\n  webhook_configs: [{url: 'http://127.0.0.1:1/'}]\n")))
    assert alertmanager.silent_receivers(doc) == ["warning"]
    assert alertmanager.config(doc)["global"] == {
        "smtp_auth_password_file": "/etc/alertmanager/secrets/smtp"}


def test_prometheus_sends_alerts_to_the_local_alertmanager_and_scrapes_the_gpus() -> None:
    gpu_files = monitoring.render_for_profile(load_profile("glm5-nvfp4-rtx6000"))
    config = yaml.safe_load(gpu_files["prometheus/prometheus.yml"])
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "127.0.0.1:9093"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs[gpu.JOB]["static_configs"][0]["targets"] == ["127.0.0.1:9400"]
    sim = yaml.safe_load(monitoring.render_for_profile(load_profile("sim"))[
        "prometheus/prometheus.yml"])
    assert gpu.JOB not in {job["job_name"] for job in sim["scrape_configs"]}


def test_the_counters_file_is_three_fields_a_line_as_dcgm_exporter_parses_it() -> None:
    text = (MONITORING / gpu.COUNTERS_FILE).read_text()
    rows = [row for row in csv.reader(
        line for line in io.StringIO(text) if not line.startswith("#"))]
    assert [row[0].strip() for row in rows] == [name for name, _, _ in gpu.COUNTERS]
    assert all(len(row) == 3 and row[1].strip() in {"gauge", "counter", "label"} for row in rows)
    used = set(re.findall(r"\bDCGM_\w+", yaml.safe_dump(promrules.alert_rules(
        (), promrules.PRODUCTION_TIMING))))
    assert used <= {name for name, _, _ in gpu.COUNTERS}  # every series an alert reads is asked for


def _server(variant: str, status: str, restarts: int, health: str) -> ContainerInfo:
    return ContainerInfo(id=variant + status, name=variant, status=status, exit_code=None,
                         labels={"opsctl.profile": "glm5", "opsctl.variant": variant},
                         image="i", started_at="", restart_count=restarts, health=health)


def _samples(collector: servers.ServerStateCollector) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels["variant"]): s.value
            for family in collector.collect() for s in family.samples}


def test_the_exporter_serves_docker_restart_counts_and_health_verdicts() -> None:
    collector = servers.ServerStateCollector(lambda: [
        _server("gathercast", "running", 3, "unhealthy"),
        _server("baseline", "running", 0, "starting"),  # no verdict yet: no health sample
        _server("native", "exited", 5, ""),
        _server("native", "running", 1, "healthy"),  # the running one wins over the old one
    ])
    assert _samples(collector) == {
        ("opsctl_server_restarts_total", "baseline"): 0.0,
        ("opsctl_server_restarts_total", "gathercast"): 3.0,
        ("opsctl_server_restarts_total", "native"): 1.0,
        ("opsctl_server_healthy", "gathercast"): 0.0,
        ("opsctl_server_healthy", "native"): 1.0,
    }


def test_a_failed_docker_lookup_yields_no_server_series() -> None:
    def down() -> list[ContainerInfo]:
        raise OpsctlError("daemon down")

    assert _samples(servers.ServerStateCollector(down)) == {}


_TWO = "- name: warning\n"


@pytest.mark.parametrize(("text", "field"), [
    ("receivers:\n- name: critical\n  webhook_configs:\n  - url: https://a.example\n"
     "    http_config: {bearer_token: s3cr3t-T0KEN}\n" + _TWO, "http_config.bearer_token"),
    ("receivers:\n- name: critical\n  webhook_configs:\n  - url: https://a.example\n"
     "    http_config: {oauth2: {client_id: x, client_secret: s3cr3t-T0KEN, token_url: "
     "https://t.example}}\n" + _TWO, "oauth2.client_secret"),
    ("receivers:\n- name: critical\n  discord_configs:\n  - webhook_url: "
     "https://discord.com/api/webhooks/1/s3cr3t-T0KEN\n" + _TWO, "discord_configs.webhook_url"),
    ("receivers:\n- name: critical\n  msteams_configs:\n  - webhook_url: "
     "https://x.webhook.office.com/s3cr3t-T0KEN\n" + _TWO, "msteams_configs.webhook_url"),
    ("receivers:\n- name: critical\n  webhook_configs:\n  - url: "
     "https://bot:s3cr3t-T0KEN@alerts.example/hook\n" + _TWO, "webhook_configs.url"),
    ("receivers:\n- name: critical\n  webhook_configs:\n  - url: "
     "https://alerts.example/hook?token=s3cr3t-T0KEN\n" + _TWO, "webhook_configs.url"),
    ("receivers:\n- name: critical\n  sns_configs:\n  - topic_arn: arn:aws:sns:x\n"
     "    sigv4: {region: us-east-1, access_key: AKIAEXAMPLE, secret_key: s3cr3t-T0KEN}\n"
     + _TWO, "sigv4.secret_key"),
])
def test_a_secret_inline_is_refused_by_field_and_by_value(tmp_path: Path, text: str,
                                                          field: str) -> None:
    """Rendered into a world-readable alertmanager.yml otherwise (issue 37, item 3)."""
    with pytest.raises(ProfileError, match=re.escape(f"{field} holds a secret inline")) as error:
        alertmanager.load_receivers(_receivers(tmp_path, text))
    assert "s3cr3t" not in str(error.value) + (error.value.hint or "")


@pytest.mark.parametrize("text", [
    "receivers:\n- name: critical\n  email_configs:\n  - auth_password: *hunter2-pw\n",
    "receivers:\n- name: critical\n  email_configs:\n  - auth_password: !hunter2-pw x\n",
    "receivers:\n- name: critical\n  email_configs:\n  - auth_password: hunter2-pw: x\n",
])
def test_a_yaml_error_never_quotes_the_line(tmp_path: Path, text: str) -> None:
    with pytest.raises(ProfileError, match="cannot read receivers file .*line 4") as error:
        alertmanager.load_receivers(_receivers(tmp_path, text))
    assert "hunter2" not in str(error.value)
