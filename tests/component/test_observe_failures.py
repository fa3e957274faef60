"""`opsctl report` against a broken Prometheus, and the Grafana secret of `monitor up`.

Every malformed answer (not JSON, the wrong shape, an error status, a dropped connection, an
oversized body) is exit 4 in one line. The Grafana admin password is a mounted file: `monitor
up --dry-run` and the containers' environment never hold its value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from stubhttp import CLOSE, Answer, StubServer, json_answer

from opsctl.config.profiles import load_profile
from opsctl.observe import monitoring


def opsctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120, stdin=subprocess.DEVNULL)


def matrix(values: object, metric: object = None) -> Answer:
    series = {"metric": {"variant": "a"} if metric is None else metric, "values": values}
    return json_answer(200, json.dumps({"status": "success",
                                        "data": {"resultType": "matrix", "result": [series]}}))


ANSWERS: dict[str, tuple[Answer, str]] = {
    "html": ((200, "text/html", b"<html><body>proxy login</body></html>"), "query failed (200)"),
    "not-json": ((200, "application/json", b"{not json"), "query failed (200)"),
    "not-utf8": ((200, "application/json", b"\xff\xfe\x00{"), "query failed (200)"),
    "json-list": (json_answer(200, "[1, 2]"), "query failed (200)"),
    "error-status": (json_answer(400, '{"status": "error", "error": "bad_data: parse error"}'),
                     "query failed (400): bad_data: parse error"),
    "error-in-200": (json_answer(200, '{"status": "error", "error": "timeout"}'),
                     "query failed (200): timeout"),
    "server-error": ((503, "text/plain", b""), "query failed (503)"),
    "no-data": (json_answer(200, '{"status": "success"}'), "data.result is not a list"),
    "data-string": (json_answer(200, '{"status": "success", "data": "x"}'), "not a list"),
    "result-string": (json_answer(200, '{"status": "success", "data": {"result": "x"}}'),
                      "not a list of series"),
    "result-numbers": (json_answer(200, '{"status": "success", "data": {"result": [1]}}'),
                       "not a list of series"),
    "values-string": (matrix("x"), "without a `metric` object and a `values` list"),
    "metric-list": (matrix([[1, "1"]], metric=[1]), "without a `metric` object"),
    "value-words": (matrix([[1, "fast"]]), "not [time, \"number\"] pairs"),
    "value-short": (matrix([[1]]), "not [time, \"number\"] pairs"),
    "value-null": (matrix([[None, None]]), "not [time, \"number\"] pairs"),
    "empty": (json_answer(200, '{"status": "success", "data": {"result": []}}'),
              "no data for the decode-latency panels"),
    "closed": (CLOSE, "did not answer"),
    "oversized": ((200, "application/json", b" " * (9 << 20)), "did not answer"),
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_a_malformed_prometheus_answer_is_exit_4_in_one_line(case: str, tmp_path: Path) -> None:
    answer, says = ANSWERS[case]
    with StubServer({r"/api/v1/query_range": answer}) as prometheus:
        run = opsctl("report", "--prometheus", prometheus.url, "--out", str(tmp_path / "r.png"))
    assert run.returncode == 4, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], run.stderr
    assert not (tmp_path / "r.png").exists()


def test_the_grafana_password_is_a_mounted_file_never_a_value(tmp_path: Path) -> None:
    password = monitoring.ensure_grafana_password(tmp_path).read_text().strip()
    run = opsctl("monitor", "up", "--dry-run", "--profile", "sim", "--config-dir", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert password not in run.stdout + run.stderr
    assert f"GF_SECURITY_ADMIN_PASSWORD__FILE={monitoring.GRAFANA_PASSWORD_MOUNT}" in run.stdout
    specs = monitoring.plan(load_profile("sim"), tmp_path, create_secrets=True).specs
    grafana = next(spec for spec in specs if spec.name == "opsctl-grafana")
    assert password not in repr(grafana)
    mount = next(m for m in grafana.mounts if m.target == monitoring.GRAFANA_PASSWORD_MOUNT)
    assert mount.read_only and Path(mount.source).read_text().strip() == password


def test_an_old_password_file_is_kept_not_regenerated(tmp_path: Path) -> None:
    """Grafana sets the admin password only when it creates its database."""
    (tmp_path / "grafana-admin-password").write_text("kept-from-before\n")
    path = monitoring.ensure_grafana_password(tmp_path)
    assert path.read_text() == "kept-from-before\n"
    assert path.parent.stat().st_mode & 0o077 == 0
