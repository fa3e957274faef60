"""The monitoring stack as a Compose file: the containers `opsctl monitor up` starts, from the
same run specs (observe/monitoring.run_specs), for hosts that run them with `docker compose`.

Each service is one RunSpec: its image by the tag monitoring/images.yaml pins (`monitor up` runs
the digest it locked at the first pull; Compose pulls the tag), its command, environment and
labels (so `opsctl monitor down` finds these containers too), the host's network namespace with
every listener on 127.0.0.1 (no port is published), `init`, the stop grace period, the same
named data volumes, and the bind mounts of the config folder relative to the Compose file, which
sits at that folder's top. dcgm-exporter gets its GPUs as a device reservation. `$` is doubled:
Compose would interpolate it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opsctl.engine.api import Mount, RunSpec
from opsctl.observe import promconfig

COMPOSE_FILE = "compose.yaml"
HEADER = (f"{promconfig.GENERATED}\nThe containers `opsctl monitor up` starts, for `docker compose "
          "up -d` in this folder\n(`opsctl monitor compose` writes a folder with the secrets it "
          "mounts; docs/observability.md).")


def _escape(text: str) -> str:
    return text.replace("$", "$$")


def _volume(mount: Mount, root: Path) -> dict[str, Any]:
    if mount.kind == "volume":
        found: dict[str, Any] = {"type": "volume", "source": mount.source, "target": mount.target}
    else:
        source = Path(mount.source)
        if not source.is_relative_to(root):
            raise ValueError(f"{mount.source} is outside the config folder {root}")
        found = {"type": "bind", "source": f"./{source.relative_to(root).as_posix()}",
                 "target": mount.target}
    if mount.read_only:
        found["read_only"] = True
    return found


def _unsupported(spec: RunSpec) -> list[str]:
    checks = {"ports": spec.ports, "ulimits": spec.ulimits, "ipc_host": spec.ipc_host,
              "shm_size": spec.shm_size, "healthcheck": spec.healthcheck,
              "log_rotation": spec.log_rotation, "restart_max": spec.restart_max is not None}
    return [name for name, value in checks.items() if value]


def service(spec: RunSpec, root: Path) -> dict[str, Any]:
    """One Compose service from a run spec whose bind mounts lie under `root`."""
    unsupported = _unsupported(spec)
    if unsupported or spec.network_mode != "host":
        raise ValueError(f"{spec.name}: {', '.join(unsupported) or 'no host network'} has no "
                         "Compose form here")
    found: dict[str, Any] = {"image": spec.image, "container_name": spec.name}
    if spec.command:
        found["command"] = [_escape(arg) for arg in spec.command]
    if spec.env:
        found["environment"] = {key: _escape(value) for key, value in sorted(spec.env.items())}
    found.update(labels=dict(sorted(spec.labels.items())), network_mode="host", init=spec.init,
                 stop_grace_period=f"{spec.stop_grace_seconds}s")
    if spec.mounts:
        found["volumes"] = [_volume(mount, root) for mount in spec.mounts]
    if spec.gpus:
        found["deploy"] = {"resources": {"reservations": {"devices": [{
            "driver": "nvidia", "device_ids": [str(gpu) for gpu in spec.gpus],
            "capabilities": ["gpu"]}]}}}
    return found


def compose_yaml(specs: list[RunSpec], root: Path) -> str:
    """The Compose file of `specs`, for the folder `root` their bind mounts lie under."""
    services = {spec.name.removeprefix("opsctl-"): service(spec, root) for spec in specs}
    volumes = sorted({mount.source for spec in specs for mount in spec.mounts
                      if mount.kind == "volume"})
    data: dict[str, Any] = {"services": services}
    if volumes:
        # named as `monitor up` names them (no project prefix): both share the same data
        data["volumes"] = {name: {"name": name} for name in volumes}
    return promconfig.dump_yaml(data, HEADER)
