"""monitoring/compose.yaml: the containers `monitor up` runs, from the same run specs, as a
Compose file (pinned tags, host network, every listener on 127.0.0.1), accepted by the real
`docker compose config` (or Debian's docker-compose); `monitor compose` writes a runnable folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from opsctl.config.profiles import load_profile
from opsctl.core.paths import project_root
from opsctl.engine.api import Mount, RunSpec
from opsctl.observe import compose, monitoring

COMMITTED = project_root() / "monitoring" / compose.COMPOSE_FILE


def _compose_command() -> list[str] | None:
    """`docker compose` (the v2 plugin) where it is installed, else Debian's docker-compose."""
    if shutil.which("docker") and subprocess.run(
            ["docker", "compose", "version"], capture_output=True, timeout=30, check=False
    ).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def _config(file: Path) -> subprocess.CompletedProcess[str]:
    command = _compose_command()
    if command is None:
        pytest.skip("needs docker compose or docker-compose (scripts/setup.sh installs it)")
    return subprocess.run([*command, "-f", str(file), "config", "-q"], capture_output=True,
                          text=True, timeout=60, check=False, cwd=file.parent)


def test_the_compose_file_is_the_plan_of_monitor_up(tmp_path: Path) -> None:
    for name in ("glm5-nvfp4-rtx6000", "sim"):
        profile = load_profile(name)
        plan = monitoring.plan(profile, tmp_path / name, create_secrets=False)
        assert plan.files[compose.COMPOSE_FILE] == compose.compose_yaml(plan.specs, tmp_path / name)
        services = yaml.safe_load(plan.files[compose.COMPOSE_FILE])["services"]
        assert [service["container_name"] for service in services.values()] == [
            spec.name for spec in plan.specs]
        for spec, service in zip(plan.specs, services.values(), strict=True):
            assert service["image"] == spec.image  # the tag monitoring/images.yaml pins
            assert service.get("command", []) == spec.command and service["labels"] == spec.labels
    assert "dcgm-exporter" not in yaml.safe_load(monitoring.compose_for(load_profile("sim")))[
        "services"]


def test_every_service_listens_on_loopback_only() -> None:
    data = yaml.safe_load(COMMITTED.read_text())
    pinned = monitoring.load_images()
    assert {service["image"] for service in data["services"].values()} == {
        pinned.ref(component) for component in monitoring.COMPONENTS}
    for name, service in data["services"].items():
        assert service["network_mode"] == "host" and "ports" not in service, name
        listens = [arg for arg in [*service.get("command", []), *service.get(
            "environment", {}).values()] if arg.startswith(("127.", "--web.listen-address"))
                   or arg.endswith(":9400")]
        assert listens and all("127.0.0.1" in arg for arg in listens), (name, listens)
    for service in data["services"].values():
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                assert volume["source"].startswith("./") and ".." not in volume["source"]
    assert all(value == {"name": key} for key, value in data["volumes"].items())


def test_the_committed_file_is_what_monitor_render_writes() -> None:
    profile = load_profile(monitoring.SHIPPED_PROFILE)
    assert COMMITTED.read_text() == monitoring.render_for_profile(profile)[compose.COMPOSE_FILE]


def test_docker_compose_accepts_the_committed_file_and_rejects_a_broken_one(tmp_path: Path) -> None:
    done = _config(COMMITTED)
    assert done.returncode == 0, done.stderr
    broken = yaml.safe_load(COMMITTED.read_text())
    broken["services"]["prometheus"]["imagee"] = "x"
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(broken))
    refused = _config(tmp_path / "compose.yaml")
    assert refused.returncode != 0 and "imagee" in refused.stderr


def test_a_dollar_is_not_interpolated_and_a_foreign_mount_is_refused(tmp_path: Path) -> None:
    spec = RunSpec(image="x:1", command=["--flag=$HOME"], name="opsctl-x", labels={},
                   env={"A": "p$w"}, network_mode="host",
                   mounts=[Mount(str(tmp_path / "conf"), "/etc/x", read_only=True)])
    service = yaml.safe_load(compose.compose_yaml([spec], tmp_path))["services"]["x"]
    assert service["command"] == ["--flag=$$HOME"] and service["environment"] == {"A": "p$$w"}
    assert service["volumes"] == [{"type": "bind", "source": "./conf", "target": "/etc/x",
                                   "read_only": True}]
    with pytest.raises(ValueError, match="outside the config folder"):
        compose.compose_yaml([spec], tmp_path / "elsewhere")


def test_monitor_compose_writes_a_folder_compose_can_run(opsctl: Any, tmp_path: Path) -> None:
    folder = tmp_path / "stack"
    done = opsctl("monitor", "compose", "--profile", "sim", "--config-dir", str(folder))
    assert done.returncode == 0, done.stderr
    assert str(folder / compose.COMPOSE_FILE) in done.stdout and "docker compose" in done.stdout
    password = folder / monitoring.GRAFANA_PASSWORD_FILE
    assert password.is_file() and password.read_text().strip() not in (
        folder / compose.COMPOSE_FILE).read_text()
    data = yaml.safe_load((folder / compose.COMPOSE_FILE).read_text())
    for service in data["services"].values():  # every bind source exists in the folder
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                assert (folder / volume["source"]).exists(), volume
    checked = _config(folder / compose.COMPOSE_FILE)
    assert checked.returncode == 0, checked.stderr
