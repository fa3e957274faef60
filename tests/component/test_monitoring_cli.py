"""The observability commands as a user runs them: exit codes, one-line errors, dry-run output."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from opsctl.core.errors import EXIT_LAUNCH, EXIT_USAGE


def _opsctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _names(stdout: str) -> list[str]:
    runs = [line for line in stdout.splitlines() if line.startswith("docker run")]
    assert all("--network host" in r for r in runs)
    return [r.split("--name ")[1].split()[0] for r in runs]


def test_monitor_up_dry_run_renders_config_and_prints_the_containers(tmp_path: Path) -> None:
    result = _opsctl("monitor", "up", "--dry-run", "--profile", "sim",
                     "--config-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    # The sim profile has no GPU, so no dcgm-exporter.
    assert _names(result.stdout) == [
        "opsctl-prometheus", "opsctl-pushgateway", "opsctl-alertmanager", "opsctl-grafana"]
    assert "digest: unresolved" in result.stdout
    assert "have no integration" in result.stdout  # the shipped receivers reach no one
    assert (tmp_path / "prometheus" / "rules" / "alerts.yml").is_file()
    assert (tmp_path / "alertmanager" / "alertmanager.yml").is_file()
    assert (tmp_path / "grafana" / "dashboards" / "decode-latency.json").is_file()
    assert not (tmp_path / "grafana-admin-password").exists()  # a dry run creates no secret


def test_monitor_up_dry_run_writes_under_the_state_dir_opsctl_state_dir_names(
        tmp_path: Path) -> None:
    """The one state directory (core.paths.default_state_dir): $OPSCTL_STATE_DIR wins over
    $XDG_STATE_HOME, for the monitoring config as for verdicts and locks."""
    state, xdg = tmp_path / "state", tmp_path / "xdg"
    result = subprocess.run(
        [sys.executable, "-m", "opsctl", "monitor", "up", "--dry-run", "--profile", "sim"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "OPSCTL_STATE_DIR": str(state), "XDG_STATE_HOME": str(xdg)})
    assert result.returncode == 0, result.stderr
    assert (state / "monitoring" / "prometheus" / "rules" / "alerts.yml").is_file()
    assert not xdg.exists()


def test_monitor_up_dry_run_of_the_gpu_profile_adds_dcgm_exporter_on_its_gpus(
    tmp_path: Path
) -> None:
    result = _opsctl("monitor", "up", "--dry-run", "--profile", "glm5-nvfp4-rtx6000",
                     "--config-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert _names(result.stdout)[-1] == "opsctl-dcgm-exporter"
    dcgm = result.stdout.splitlines()[-1]
    assert '--gpus "device=0,1,2,3,4,5,6,7"' in dcgm and "-a 127.0.0.1:9400" in dcgm
    assert (tmp_path / "dcgm-exporter" / "counters.csv").is_file()


def test_monitor_up_with_an_inline_secret_in_the_receivers_is_refused(tmp_path: Path) -> None:
    receivers = tmp_path / "receivers.yml"
    receivers.write_text("receivers:\n- name: critical\n  slack_configs:\n"
                         "  - api_url: https://hooks.slack.com/services/SECRET\n- name: warning\n")
    result = _opsctl("monitor", "up", "--dry-run", "--profile", "sim", "--receivers",
                     str(receivers), "--config-dir", str(tmp_path / "config"))
    assert result.returncode == EXIT_USAGE
    assert "holds a secret inline" in result.stderr and "SECRET" not in result.stderr
    assert "Traceback" not in result.stderr


def test_report_without_prometheus_is_one_line_and_exit_4(tmp_path: Path) -> None:
    result = _opsctl("report", "--prometheus", f"http://127.0.0.1:{_closed_port()}",
                     "--out", str(tmp_path / "x.png"))
    assert result.returncode == EXIT_LAUNCH
    assert "Traceback" not in result.stderr
    assert "did not answer" in result.stderr and "hint:" in result.stderr
    assert not (tmp_path / "x.png").exists()


def test_report_rejects_a_bad_duration() -> None:
    result = _opsctl("report", "--since", "soon")
    assert result.returncode == EXIT_USAGE
    assert "bad duration" in result.stderr


def test_exporter_on_a_taken_port_is_a_usage_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = _opsctl("exporter", "--profile", "sim", "--variant", "gathercast",
                         "--port", str(port))
    assert result.returncode == EXIT_USAGE
    assert "cannot listen" in result.stderr
