"""`opsctl monitor render|up|down`: Prometheus, a Pushgateway, Alertmanager, Grafana and (on a
GPU profile) dcgm-exporter for one host.

Rendering is pure: the profile's SLO, the scrape targets and the user's Alertmanager receivers
become the files under monitoring/ (committed for the shipped profile) or under a config folder
for `up`. The containers run with the host's network namespace because Prometheus must reach
sglang and the exporter on 127.0.0.1; each listens on 127.0.0.1 only. This module only plans: the
engine is handed to `opsctl.observe.app`, which starts and stops the containers. Images are pinned
by tag in monitoring/images.yaml and by digest in monitoring/images.lock.json, written at the first
pull on the user's host.

Grafana's admin password is generated once per host and handed over as a file
(`GF_SECURITY_ADMIN_PASSWORD__FILE`, Grafana's `__FILE` convention), never as an environment
value: `docker inspect`, `--dry-run` and the plan hold only the file's path. The file is
world-readable inside a 0700 directory, because Grafana runs as its own uid (472) in the
container and reads it through a read-only bind mount, while no other host user can reach it.

Everything written into a config folder goes through `core.files.OwnedFolder`: nothing is
written, replaced or chmod-ed through a symbolic link inside it, and a file there that does not
carry `promconfig.MARKER` (an operator's own compose.yaml) is overwritten only with --force.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from opsctl.core import labels as keys
from opsctl.core.errors import LaunchError
from opsctl.core.files import OwnedFolder, atomic_write_text
from opsctl.core.paths import default_state_dir, project_root
from opsctl.engine.api import Engine, Mount, RunSpec
from opsctl.observe import alertmanager, compose, dashboard, gpu, promconfig
from opsctl.observe.promnames import SloRule, slo_rules
from opsctl.observe.promrules import PRODUCTION_TIMING, RuleTiming

if TYPE_CHECKING:
    from opsctl.config.profiles import Profile

PROMETHEUS_PORT = 9090
PUSHGATEWAY_PORT = 9091
GRAFANA_PORT = 3000
EXPORTER_PORT = 9464
DASHBOARD_FILE = "dashboards/decode-latency.json"
GRAFANA_PASSWORD_FILE = f"{alertmanager.SECRETS_ROOT}/grafana-admin-password"
_OLD_PASSWORD_FILE = "grafana-admin-password"  # where opsctl kept it before (mode 0600)
GRAFANA_PASSWORD_MOUNT = "/run/secrets/grafana-admin-password"
COMPONENTS = ("prometheus", "pushgateway", "alertmanager", "grafana", "dcgm_exporter")
STOP_GRACE_SECONDS = 30
# The committed files under monitoring/ are rendered for the production profile.
SHIPPED_PROFILE = "glm5-nvfp4-rtx6000"


@dataclass(frozen=True)
class Images:
    prometheus: str
    pushgateway: str
    alertmanager: str
    grafana: str
    dcgm_exporter: str

    def ref(self, component: str) -> str:
        return str(getattr(self, component))


def images_path() -> Path:
    return project_root() / "monitoring" / "images.yaml"


def lock_path() -> Path:
    return project_root() / "monitoring" / "images.lock.json"


def load_images(path: Path | None = None) -> Images:
    data = yaml.safe_load((path or images_path()).read_text())
    return Images(**{name: str(data[name]) for name in COMPONENTS})


def load_lock(path: Path | None = None) -> dict[str, str]:
    target = path or lock_path()
    return json.loads(target.read_text()) if target.is_file() else {}


# --- rendering ---------------------------------------------------------------------------------


def targets_for(profile: Profile, scrape_interval: str = "15s") -> promconfig.ScrapeTargets:
    container = profile.container
    return promconfig.ScrapeTargets(
        sglang=(f"{container.publish_address}:{container.host_port}",),
        opsctl_exporter=(f"127.0.0.1:{EXPORTER_PORT}",),
        pushgateway=(f"127.0.0.1:{PUSHGATEWAY_PORT}",),
        alertmanager=(f"127.0.0.1:{alertmanager.PORT}",),
        dcgm_exporter=(f"127.0.0.1:{gpu.PORT}",) if container.gpus else (),
        scrape_interval=scrape_interval,
        evaluation_interval=scrape_interval,
    )


def grafana_files(prometheus_url: str) -> dict[str, str]:
    """Grafana provisioning (datasource, dashboard provider) and the dashboard, by path."""
    datasource = {
        "apiVersion": 1,
        "datasources": [{
            "name": "Prometheus (opsctl)",
            "uid": dashboard.DATASOURCE_UID,
            "type": "prometheus",
            "access": "proxy",
            "url": prometheus_url,
            "isDefault": True,
            "editable": False,
        }],
    }
    provider = {
        "apiVersion": 1,
        "providers": [{
            "name": "opsctl",
            "folder": "opsctl",
            "type": "file",
            "disableDeletion": True,
            "allowUiUpdates": False,
            "options": {"path": "/etc/grafana/dashboards"},
        }],
    }
    header = promconfig.GENERATED
    return {
        "provisioning/datasources/prometheus.yml": promconfig.dump_yaml(datasource, header),
        "provisioning/dashboards/opsctl.yml": promconfig.dump_yaml(provider, header),
        DASHBOARD_FILE: dashboard.dashboard_json(),
    }


def render_files(
    slos: tuple[SloRule, ...],
    targets: promconfig.ScrapeTargets,
    timing: RuleTiming = PRODUCTION_TIMING,
    receivers: dict[str, Any] | None = None,
    alert_timing: alertmanager.Timing = alertmanager.PRODUCTION_TIMING,
) -> dict[str, str]:
    """Every generated file, keyed by its path under monitoring/."""
    files = {f"prometheus/{path}": text
             for path, text in promconfig.render_prometheus_files(slos, targets, timing).items()}
    am_config = alertmanager.config(receivers or alertmanager.load_receivers(), alert_timing)
    files[alertmanager.CONFIG_FILE] = promconfig.dump_yaml(
        am_config, f"{promconfig.GENERATED}\nReceivers from monitoring/alertmanager/receivers.yml "
        "(edit that file); routing and inhibition from\nopsctl/observe/alertmanager.py.")
    files[gpu.COUNTERS_FILE] = gpu.counters_csv(
        f"{promconfig.GENERATED}\nThe DCGM fields dcgm-exporter exports (opsctl/observe/gpu.py).")
    files.update({f"grafana/{path}": text
                  for path, text in grafana_files(f"http://127.0.0.1:{PROMETHEUS_PORT}").items()})
    return files


def config_folder(root: Path, option: str = "--config-dir") -> OwnedFolder:
    """The folder monitoring's files go into, as the user named it with `option`."""
    return OwnedFolder(root, promconfig.MARKER, option)


def check_files(files: dict[str, str], folder: OwnedFolder, force: bool = False) -> None:
    """UsageError (exit 2) before anything is written when one of `files` may not be: a link
    on its way, or an operator's file there (unless `force`)."""
    for relative in sorted(files):
        folder.check_write(relative, force=force)


def write_files(files: dict[str, str], root: Path | OwnedFolder, force: bool = False
                ) -> list[Path]:
    """Write each file atomically: a running Prometheus or Grafana never reads half of one.
    Written as rendered (not scrubbed): the services read these files. All are checked first
    (`check_files`), so a refusal leaves the folder as it was."""
    folder = root if isinstance(root, OwnedFolder) else config_folder(root)
    check_files(files, folder, force)
    return [folder.write(relative, text, force=force, scrub=False)
            for relative, text in sorted(files.items())]


def render_for_profile(profile: Profile, receivers: dict[str, Any] | None = None) -> dict[str, str]:
    """The config files, and the Compose file of the containers `monitor up` runs with them."""
    files = render_files(slo_rules(profile), targets_for(profile), receivers=receivers)
    files[compose.COMPOSE_FILE] = compose_for(profile)
    return files


# Where the Compose file's bind mounts are rendered from: any folder works, as every bind mount
# of the plan lies under its config folder and is written relative to the Compose file there.
_COMPOSE_ROOT = Path("/opsctl-monitoring")


def compose_for(profile: Profile) -> str:
    """monitoring/compose.yaml: `run_specs` of `monitor up`, the images by their pinned tags."""
    images = load_images()
    refs = {component: images.ref(component) for component in COMPONENTS}
    return compose.compose_yaml(
        run_specs(refs, _COMPOSE_ROOT, profile.name, profile.container.gpus), _COMPOSE_ROOT
    )


# --- containers --------------------------------------------------------------------------------


def default_config_dir() -> Path:
    """<the state directory>/monitoring (core.paths.default_state_dir: $OPSCTL_STATE_DIR first)."""
    return default_state_dir() / "monitoring"


def _labels(component: str, profile: str) -> dict[str, str]:
    return {keys.MANAGED: keys.TRUE, keys.ROLE: keys.ROLE_MONITORING,
            keys.COMPONENT: component, keys.PROFILE: profile}


def run_specs(images: dict[str, str], config_dir: Path, profile: str,
              gpus: list[int] | None = None) -> list[RunSpec]:
    """The containers; `images` maps component -> the reference to run (tag or digest).

    dcgm-exporter joins only for a profile with GPUs (it watches exactly those).
    """

    def spec(component: str, command: list[str], mounts: list[Mount],
             env: dict[str, str] | None = None) -> RunSpec:
        return RunSpec(
            image=images[component], command=command, name=f"opsctl-{component}",
            labels=_labels(component, profile), env=env or {}, mounts=mounts,
            network_mode="host", stop_grace_seconds=STOP_GRACE_SECONDS,
        )

    prom_dir = str(config_dir / "prometheus")
    grafana_dir = config_dir / "grafana"
    specs = [
        spec("prometheus", [
            "--config.file=/etc/prometheus/prometheus.yml",
            "--storage.tsdb.path=/prometheus",
            "--storage.tsdb.retention.time=15d",
            f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
        ], [Mount(prom_dir, "/etc/prometheus", read_only=True),
            Mount("opsctl-prometheus-data", "/prometheus", kind="volume")]),
        spec("pushgateway", [
            f"--web.listen-address=127.0.0.1:{PUSHGATEWAY_PORT}",
            # Keep pushed smoke/bench results across restarts.
            "--persistence.file=/data/pushgateway.db",
        ], [Mount("opsctl-pushgateway-data", "/data", kind="volume")]),
        spec("grafana", [], [
            Mount(str(grafana_dir / "provisioning"), "/etc/grafana/provisioning", read_only=True),
            Mount(str(grafana_dir / "dashboards"), "/etc/grafana/dashboards", read_only=True),
            Mount("opsctl-grafana-data", "/var/lib/grafana", kind="volume"),
            Mount(str(config_dir / GRAFANA_PASSWORD_FILE), GRAFANA_PASSWORD_MOUNT, read_only=True),
        ], env={
            "GF_SERVER_HTTP_ADDR": "127.0.0.1",
            "GF_SERVER_HTTP_PORT": str(GRAFANA_PORT),
            "GF_SECURITY_ADMIN_PASSWORD__FILE": GRAFANA_PASSWORD_MOUNT,
            "GF_AUTH_ANONYMOUS_ENABLED": "true",
            "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
            "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH": f"/etc/grafana/{DASHBOARD_FILE}",
            "GF_ANALYTICS_REPORTING_ENABLED": "false",
            "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
        }),
    ]
    specs.insert(2, alertmanager.run_spec(images["alertmanager"], config_dir,
                                          _labels("alertmanager", profile), STOP_GRACE_SECONDS))
    if gpus:
        specs.append(gpu.run_spec(images["dcgm_exporter"], config_dir, gpus,
                                  _labels("dcgm-exporter", profile), STOP_GRACE_SECONDS))
    return specs


def ensure_grafana_password(config_dir: Path) -> Path:
    """The admin password file, generated once per host (never a default like admin/admin).

    Grafana sets the password only when it creates its database, so an existing file (also
    one at the old place) is kept, never regenerated. A link at secrets/ or at the file is
    refused (exit 2), never chmod-ed through.
    """
    folder = config_folder(config_dir)
    folder.ensure_dir(alertmanager.SECRETS_ROOT, 0o700)
    if folder.inspect(GRAFANA_PASSWORD_FILE) is None and folder.inspect(_OLD_PASSWORD_FILE):
        os.replace(config_dir / _OLD_PASSWORD_FILE, config_dir / GRAFANA_PASSWORD_FILE)
    return folder.keep_file(GRAFANA_PASSWORD_FILE, lambda: secrets.token_urlsafe(18) + "\n",
                            0o644)


@dataclass(frozen=True)
class Plan:
    config_dir: Path
    files: dict[str, str]
    specs: list[RunSpec]
    digests: dict[str, str]  # image tag -> locked digest ("" = unresolved until first pull)
    silent_receivers: list[str]  # routed receivers with no integration: their alerts reach no one


def plan(profile: Profile, config_dir: Path, create_secrets: bool,
         receivers_file: Path | None = None, force: bool = False) -> Plan:
    """What `monitor up|compose` writes and runs; the folder is checked before anything is
    created in it (`check_files`)."""
    images = load_images()
    lock = load_lock()
    refs = {c: images.ref(c) for c in COMPONENTS}
    receivers = alertmanager.load_receivers(receivers_file)
    files = render_for_profile(profile, receivers)
    check_files(files, config_folder(config_dir), force)
    if create_secrets:
        ensure_grafana_password(config_dir)
        alertmanager.ensure_secrets_dir(config_folder(config_dir))
    specs = run_specs(refs, config_dir, profile.name, profile.container.gpus)
    return Plan(config_dir, files, specs, {s.image: lock.get(s.image, "") for s in specs},
                alertmanager.silent_receivers(receivers))


def resolve_digest(engine: Engine, ref: str, lock: dict[str, str]) -> str:
    """Pull once, then pin: return `repo@sha256:...` and check it against the lock."""
    digests = engine.image_repo_digests(ref) or engine.pull_image(ref)
    repo = ref.rsplit(":", 1)[0]
    # RepoDigests may carry the registry host (docker.io/prom/prometheus@sha256:...).
    matching = [d for d in digests
                if d.split("@", 1)[0] == repo or d.split("@", 1)[0].endswith("/" + repo)]
    if not matching:
        raise LaunchError(f"{ref} has no registry digest on this engine",
                          hint="pull it from its registry (a locally built image has none)")
    locked = lock.get(ref)
    if locked and locked not in matching:
        raise LaunchError(
            f"{ref} now resolves to {matching[0]}, but monitoring/images.lock.json pins {locked}",
            hint="the tag moved upstream: review the new image, then delete its lock entry",
        )
    return locked or matching[0]


def save_lock(lock: dict[str, str], path: Path | None = None) -> None:
    atomic_write_text(path or lock_path(), json.dumps(lock, indent=2, sort_keys=True) + "\n")


def monitoring_labels() -> dict[str, str]:
    """What finds every monitoring container opsctl started (for `monitor down`)."""
    return {keys.ROLE: keys.ROLE_MONITORING}
