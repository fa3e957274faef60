"""`opsctl monitor render|up|down`: Prometheus, a Pushgateway and Grafana for one host.

Rendering is pure: the profile's SLO and the scrape targets become the files under
monitoring/ (committed for the shipped profile) or under a config folder for `up`. The three
containers run with the host's network namespace because Prometheus must reach sglang and the
exporter on 127.0.0.1; each listens on 127.0.0.1 only. Docker is reached through
`opsctl.engine.dockerpy` alone; images are pinned by tag in monitoring/images.yaml and by digest in
monitoring/images.lock.json, written at the first pull on the user's host.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from opsctl.core.errors import LaunchError
from opsctl.core.paths import project_root
from opsctl.observe import dashboard
from opsctl.observe import promconfig as prom_config

if TYPE_CHECKING:
    from opsctl.deploy.profiles import Profile
    from opsctl.engine.dockerpy import Engine, RunSpec

ROLE_LABEL = "opsctl.role"
MONITORING_ROLE = "monitoring"
PROMETHEUS_PORT = 9090
PUSHGATEWAY_PORT = 9091
GRAFANA_PORT = 3000
EXPORTER_PORT = 9464
DASHBOARD_FILE = "dashboards/decode-latency.json"
GRAFANA_PASSWORD_FILE = "grafana-admin-password"
COMPONENTS = ("prometheus", "pushgateway", "grafana")
# The committed files under monitoring/ are rendered for the production profile.
SHIPPED_PROFILE = "glm5-nvfp4-rtx6000"


@dataclass(frozen=True)
class Images:
    prometheus: str
    pushgateway: str
    grafana: str

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


def targets_for(profile: Profile, scrape_interval: str = "15s") -> prom_config.ScrapeTargets:
    container = profile.container
    return prom_config.ScrapeTargets(
        sglang=(f"{container.publish_address}:{container.host_port}",),
        opsctl_exporter=(f"127.0.0.1:{EXPORTER_PORT}",),
        pushgateway=(f"127.0.0.1:{PUSHGATEWAY_PORT}",),
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
    header = prom_config.GENERATED
    return {
        "provisioning/datasources/prometheus.yml": prom_config.dump_yaml(datasource, header),
        "provisioning/dashboards/opsctl.yml": prom_config.dump_yaml(provider, header),
        DASHBOARD_FILE: dashboard.dashboard_json(),
    }


def render_files(
    slo: prom_config.TpotSlo,
    targets: prom_config.ScrapeTargets,
    timing: prom_config.RuleTiming = prom_config.PRODUCTION_TIMING,
) -> dict[str, str]:
    """Every generated file, keyed by its path under monitoring/."""
    files = {f"prometheus/{path}": text
             for path, text in prom_config.render_prometheus_files(slo, targets, timing).items()}
    files.update({f"grafana/{path}": text
                  for path, text in grafana_files(f"http://127.0.0.1:{PROMETHEUS_PORT}").items()})
    return files


def write_files(files: dict[str, str], root: Path) -> list[Path]:
    written = []
    for relative, text in sorted(files.items()):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def render_for_profile(profile: Profile) -> dict[str, str]:
    return render_files(prom_config.tpot_slo(profile), targets_for(profile))


# --- containers --------------------------------------------------------------------------------


def default_config_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "opsctl" / "monitoring"


def _labels(component: str, profile: str) -> dict[str, str]:
    from opsctl.engine.dockerpy import MANAGED_LABEL

    return {MANAGED_LABEL: "true", ROLE_LABEL: MONITORING_ROLE,
            "opsctl.component": component, "opsctl.profile": profile}


def run_specs(
    images: dict[str, str], config_dir: Path, profile: str, grafana_password: str
) -> list[RunSpec]:
    """The three containers; `images` maps component -> the reference to run (tag or digest)."""
    from opsctl.engine.dockerpy import Mount, RunSpec

    def spec(component: str, command: list[str], mounts: list[Mount],
             env: dict[str, str] | None = None) -> RunSpec:
        return RunSpec(
            image=images[component], command=command, name=f"opsctl-{component}",
            labels=_labels(component, profile), env=env or {}, mounts=mounts,
            network_mode="host", stop_grace_seconds=30,
        )

    prom_dir = str(config_dir / "prometheus")
    grafana_dir = config_dir / "grafana"
    return [
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
        ], env={
            "GF_SERVER_HTTP_ADDR": "127.0.0.1",
            "GF_SERVER_HTTP_PORT": str(GRAFANA_PORT),
            "GF_SECURITY_ADMIN_PASSWORD": grafana_password,
            "GF_AUTH_ANONYMOUS_ENABLED": "true",
            "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
            "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH": f"/etc/grafana/{DASHBOARD_FILE}",
            "GF_ANALYTICS_REPORTING_ENABLED": "false",
            "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
        }),
    ]


def grafana_password(config_dir: Path, create: bool) -> str:
    """Generated once per host and kept in a 0600 file; never a default like admin/admin."""
    path = config_dir / GRAFANA_PASSWORD_FILE
    if path.is_file():
        return path.read_text().strip()
    if not create:
        return f"<generated at first `monitor up`, kept in {path}>"
    config_dir.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(18)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return value


@dataclass(frozen=True)
class Plan:
    config_dir: Path
    files: dict[str, str]
    specs: list[RunSpec]
    digests: dict[str, str]  # image tag -> locked digest ("" = unresolved until first pull)


def plan(profile: Profile, config_dir: Path, create_secrets: bool) -> Plan:
    images = load_images()
    lock = load_lock()
    refs = {c: images.ref(c) for c in COMPONENTS}
    files = render_for_profile(profile)
    password = grafana_password(config_dir, create=create_secrets)
    specs = run_specs(refs, config_dir, profile.name, password)
    return Plan(config_dir, files, specs, {ref: lock.get(ref, "") for ref in refs.values()})


def dry_run_text(result: Plan) -> str:
    lines = [f"# config rendered to {result.config_dir}:"]
    lines += [f"#   {path}" for path in sorted(result.files)]
    for ref, digest in result.digests.items():
        state = digest or "unresolved: recorded in monitoring/images.lock.json at first pull"
        lines.append(f"# {ref} digest: {state}")
    for spec in result.specs:
        argv = spec.docker_run_argv()
        lines.append(" ".join(_mask(arg) for arg in argv))
    return "\n".join(lines)


def _mask(arg: str) -> str:
    if arg.startswith("GF_SECURITY_ADMIN_PASSWORD="):
        return "GF_SECURITY_ADMIN_PASSWORD=****"
    return arg


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


def up(engine: Engine, profile: Profile, config_dir: Path) -> list[str]:
    result = plan(profile, config_dir, create_secrets=True)
    write_files(result.files, config_dir)
    lock = load_lock()
    refs = {spec.image: resolve_digest(engine, spec.image, lock) for spec in result.specs}
    if {k: v for k, v in lock.items() if k in refs} != refs:
        lock.update(refs)
        lock_path().write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    down(engine)
    started = []
    for spec in result.specs:
        info = engine.run(replace(spec, image=refs[spec.image]))
        started.append(info.name)
    return started


def down(engine: Engine) -> list[str]:
    removed = []
    for info in engine.find({ROLE_LABEL: MONITORING_ROLE}):
        engine.stop_and_remove(info.id, grace_seconds=30)
        removed.append(info.name)
    return removed
