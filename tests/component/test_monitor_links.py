"""`monitor compose|up` write only inside their config folder, and only opsctl's files there
(issue 37, item 2): no chmod or write through a symbolic link, an operator's own file is
overwritten only with --force."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opsctl.config.profiles import load_profile
from opsctl.core.errors import UsageError
from opsctl.observe import app as observe
from opsctl.observe import monitoring


def compose(config_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", "monitor", "compose", "--profile",
                           "sim", "--config-dir", str(config_dir), *extra],
                          capture_output=True, text=True, env=dict(os.environ), timeout=120,
                          stdin=subprocess.DEVNULL)


def test_a_linked_password_file_is_refused_not_chmod_ed(tmp_path: Path) -> None:
    secret = tmp_path / "operator-secret"
    secret.write_text("do-not-share\n")
    secret.chmod(0o600)
    (tmp_path / "cfg" / "secrets").mkdir(parents=True)
    (tmp_path / "cfg" / monitoring.GRAFANA_PASSWORD_FILE).symlink_to(secret)
    run = compose(tmp_path / "cfg")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "grafana-admin-password is a symbolic link" in run.stderr
    assert secret.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "cfg" / "compose.yaml").exists()  # refused before any write


def test_a_linked_secrets_folder_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "secrets").symlink_to(shared)
    with pytest.raises(UsageError, match="secrets is a symbolic link"):
        observe.monitor_compose(load_profile("sim"), tmp_path / "cfg")
    assert shared.stat().st_mode & 0o777 == 0o755 and not os.listdir(shared)


def test_a_linked_prometheus_folder_is_not_written_into(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "prometheus.yml").write_text("operator: config\n")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "prometheus").symlink_to(elsewhere)
    with pytest.raises(UsageError, match="prometheus is a symbolic link"):
        observe.monitor_compose(load_profile("sim"), tmp_path / "cfg", force=True)
    assert (elsewhere / "prometheus.yml").read_text() == "operator: config\n"
    assert sorted(os.listdir(elsewhere)) == ["prometheus.yml"]


def test_an_operators_compose_file_is_overwritten_only_with_force(tmp_path: Path) -> None:
    mine = tmp_path / "cfg" / "compose.yaml"
    mine.parent.mkdir()
    mine.write_text("services: {mine: {image: busybox}}\n")
    run = compose(tmp_path / "cfg")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "compose.yaml is there and opsctl did not write it" in run.stderr
    assert mine.read_text() == "services: {mine: {image: busybox}}\n"
    assert sorted(os.listdir(mine.parent)) == ["compose.yaml"]  # nothing else created either
    run = compose(tmp_path / "cfg", "--force")
    assert run.returncode == 0, run.stdout + run.stderr
    assert monitoring.promconfig.MARKER in mine.read_text()
    assert compose(tmp_path / "cfg").returncode == 0  # its own files: replaced without --force


def test_every_file_monitoring_writes_carries_the_marker() -> None:
    """What tells opsctl's files from an operator's in a config folder."""
    from opsctl.core.files import MARKER_WINDOW

    files = monitoring.render_for_profile(load_profile("sim"))
    for relative, text in files.items():
        assert monitoring.promconfig.MARKER in text.encode()[:MARKER_WINDOW].decode(), relative
