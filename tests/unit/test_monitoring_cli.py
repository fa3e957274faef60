"""The observability commands as a user runs them: exit codes, one-line errors, dry-run output."""

from __future__ import annotations

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


def test_monitor_up_dry_run_renders_config_and_prints_three_containers(tmp_path: Path) -> None:
    result = _opsctl("monitor", "up", "--dry-run", "--profile", "sim",
                     "--config-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    runs = [line for line in result.stdout.splitlines() if line.startswith("docker run")]
    assert [r.split("--name ")[1].split()[0] for r in runs] == [
        "opsctl-prometheus", "opsctl-pushgateway", "opsctl-grafana"]
    assert all("--network host" in r for r in runs)
    assert "digest: unresolved" in result.stdout
    assert (tmp_path / "prometheus" / "rules" / "alerts.yml").is_file()
    assert (tmp_path / "grafana" / "dashboards" / "decode-latency.json").is_file()
    assert not (tmp_path / "grafana-admin-password").exists()  # a dry run creates no secret


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
