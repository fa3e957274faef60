"""Alertmanager for `opsctl monitor up`: where alerts go, how they are grouped and silenced.

The routing is opsctl's (rendered here): alerts are grouped by alertname, profile and variant,
`severity="critical"` goes to the receiver named `critical` and everything else to `warning`,
and inhibition keeps one cause from paging five times (below). The receivers are the user's:
monitoring/alertmanager/receivers.yml (Alertmanager's own `receivers:` syntax, plus `global:`
and `templates:`), merged into alertmanager.yml at render time, because Alertmanager reads one
file. Secrets never go into that file (alertmanager.yml is world-readable, for Alertmanager's
uid): the receivers file is refused when it holds a secret inline, by field (a password, API
key, token, bearer_token, oauth2 client_secret, sigv4 secret_key, a Slack, Discord or Teams
webhook URL, ...) or by value (a URL with userinfo or with a secret in its query, `?token=`).
The examples read them from files (`api_url_file`, `auth_password_file`, `credentials_file`,
all supported by Alertmanager 0.25) under the host's `<config-dir>/secrets/alertmanager/`,
mounted read-only at /etc/alertmanager/secrets. A YAML error names its line and column, never
the line's text (it may be a password's).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from opsctl.config.profile_yaml import yaml_problem
from opsctl.core.errors import ProfileError
from opsctl.core.files import OwnedFolder, read_bounded
from opsctl.core.paths import project_root
from opsctl.core.redact import redact_named_values, redact_userinfo
from opsctl.core.yamlread import load_yaml
from opsctl.engine.api import Mount, RunSpec

PORT = 9093
MAX_RECEIVERS_BYTES = 1 << 20
RECEIVERS = ("critical", "warning")
CONFIG_FILE = "alertmanager/alertmanager.yml"
SECRETS_ROOT = "secrets"  # under the config dir: 0700, no other host user gets in
SECRETS_DIR = f"{SECRETS_ROOT}/alertmanager"  # mounted at SECRETS_MOUNT
SECRETS_MOUNT = "/etc/alertmanager/secrets"
_ALLOWED = {"global", "receivers", "templates"}
# Fields that hold a secret in Alertmanager's configuration; each has a *_file twin (or, for
# webhooks, http_config.authorization.credentials_file).
_SECRET_KEYS = {
    "auth_password", "auth_secret", "api_key", "api_secret", "routing_key", "service_key",
    "bot_token", "credentials", "password", "token", "token_id", "user_key",
    "smtp_auth_password", "smtp_auth_secret", "slack_api_url", "opsgenie_api_key",
    "victorops_api_key", "wechat_api_secret", "telegram_api_url", "webex_api_url",
    "bearer_token", "client_secret", "secret_key", "webhook_url",
}
# A field that is a secret under one parent only: (parent, field).
_SECRET_PAIRS = {("slack_configs", "api_url"), ("tls_config", "key")}


@dataclass(frozen=True)
class Timing:
    group_wait: str
    group_interval: str
    repeat_interval: str
    critical_repeat_interval: str


PRODUCTION_TIMING = Timing("30s", "5m", "4h", "1h")


def receivers_path() -> Path:
    return project_root() / "monitoring" / "alertmanager" / "receivers.yml"


def _walk(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, str(key)), value
            yield from _walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item, path)


def _read_receivers(source: Path) -> Any:
    """The receivers file's YAML; ProfileError (its line never quoted) when it cannot be read."""
    try:
        return load_yaml(read_bounded(source, "receivers file", MAX_RECEIVERS_BYTES))
    except OSError as exc:
        raise ProfileError(
            f"cannot read receivers file {source}: {exc.strerror or exc}",
            hint="see monitoring/alertmanager/receivers.yml for the format",
        ) from None
    except yaml.YAMLError as exc:  # its text quotes the line, which may hold a password
        raise ProfileError(
            f"cannot read receivers file {source}: {yaml_problem(exc)}",
            hint="see monitoring/alertmanager/receivers.yml for the format",
        ) from None


def load_receivers(path: Path | None = None) -> dict[str, Any]:
    """The user's receivers file, checked: the two routed receivers exist, no inline secret."""
    source = path or receivers_path()
    doc = _read_receivers(source)
    if not isinstance(doc, dict) or not isinstance(doc.get("receivers"), list):
        raise ProfileError(f"{source}: needs a `receivers:` list",
                           hint="see monitoring/alertmanager/receivers.yml for the format")
    if extra := sorted(set(doc) - _ALLOWED):
        raise ProfileError(f"{source}: unknown top-level key(s) {', '.join(extra)}",
                           hint=f"only {', '.join(sorted(_ALLOWED))}: opsctl renders the routing")
    names = [r.get("name") for r in doc["receivers"] if isinstance(r, dict)]
    if missing := [name for name in RECEIVERS if name not in names]:
        raise ProfileError(f"{source}: no receiver named {', '.join(missing)}",
                           hint="critical alerts route to `critical`, all others to `warning`")
    for key_path, value in _walk(doc):
        if value and _inline_secret(key_path, value):
            raise ProfileError(
                f"{source}: {'.'.join(key_path)} holds a secret inline",
                hint=f"use {key_path[-1]}_file (or credentials_file) pointing into "
                f"{SECRETS_MOUNT}/, with the file under <config-dir>/{SECRETS_DIR}/")
    return doc


def _inline_secret(key_path: tuple[str, ...], value: Any) -> bool:
    """A secret by its field's name, or a string that carries one whatever its field: a URL
    with userinfo, a secret-named query parameter (what `core.redact` would mask)."""
    if key_path[-1] in _SECRET_KEYS or tuple(key_path[-2:]) in _SECRET_PAIRS:
        return True
    return isinstance(value, str) and redact_named_values(redact_userinfo(value)) != value


def silent_receivers(doc: dict[str, Any]) -> list[str]:
    """Routed receivers with no integration: alerts routed there reach no one."""
    return [r["name"] for r in doc["receivers"]
            if isinstance(r, dict) and r.get("name") in RECEIVERS
            and not any(key.endswith("_configs") and value for key, value in r.items())]


def _inhibit(source: str, target: str, equal: list[str]) -> dict[str, Any]:
    return {"source_matchers": [source], "target_matchers": [target], "equal": equal}


# One cause, one page: a down server also stops decode, burns the SLOs and leaves the KV
# gauges stale; a fast burn already says what the slow burn would; KV pressure includes
# "KV high"; a crash loop is the louder name of a restart.
INHIBIT_RULES = (
    _inhibit(
        'alertname="SglangServerDown"',
        'alertname=~"Sglang(Tpot|Ttft)Slo(Fast|Slow)Burn|SglangDecodeStalled'
        '|SglangKvCache(High|Pressure)"',
        ["instance"],
    ),
    _inhibit(
        'alertname=~"Sglang(Tpot|Ttft)SloFastBurn"',
        'alertname=~"Sglang(Tpot|Ttft)SloSlowBurn"',
        ["slo", "variant", "instance"],
    ),
    _inhibit(
        'alertname="SglangKvCachePressure"',
        'alertname="SglangKvCacheHigh"',
        ["variant", "instance"],
    ),
    _inhibit(
        'alertname="SglangServerCrashLooping"',
        'alertname="SglangServerRestarting"',
        ["profile", "variant"],
    ),
)


def config(doc: dict[str, Any], timing: Timing = PRODUCTION_TIMING) -> dict[str, Any]:
    """alertmanager.yml: the user's receivers (and global settings) with opsctl's routing."""
    out: dict[str, Any] = {}
    if doc.get("global"):
        out["global"] = doc["global"]
    out["route"] = {
        "receiver": "warning",
        "group_by": ["alertname", "profile", "variant"],
        "group_wait": timing.group_wait,
        "group_interval": timing.group_interval,
        "repeat_interval": timing.repeat_interval,
        "routes": [
            {"matchers": ['severity="critical"'], "receiver": "critical",
             "repeat_interval": timing.critical_repeat_interval},
            {"matchers": ['severity="warning"'], "receiver": "warning"},
        ],
    }
    out["inhibit_rules"] = [dict(rule) for rule in INHIBIT_RULES]
    out["receivers"] = doc["receivers"]
    if doc.get("templates"):
        out["templates"] = doc["templates"]
    return out


def run_spec(image: str, config_dir: Path, labels: dict[str, str], grace: int) -> RunSpec:
    """Alertmanager on 127.0.0.1 only, with its HA gossip port (0.0.0.0:9094 by default) off."""
    return RunSpec(
        image=image, name="opsctl-alertmanager", labels=labels,
        command=[
            "--config.file=/etc/alertmanager/alertmanager.yml",
            "--storage.path=/alertmanager",
            f"--web.listen-address=127.0.0.1:{PORT}",
            "--cluster.listen-address=",
        ],
        mounts=[
            Mount(str(config_dir / "alertmanager"), "/etc/alertmanager", read_only=True),
            Mount(str(config_dir / SECRETS_DIR), SECRETS_MOUNT, read_only=True),
            Mount("opsctl-alertmanager-data", "/alertmanager", kind="volume"),
        ],
        network_mode="host", stop_grace_seconds=grace,
    )


def ensure_secrets_dir(folder: OwnedFolder) -> Path:
    """`secrets/` stays 0700 (no other host user gets in); its alertmanager/ folder is 0755
    so that Alertmanager (uid nobody in its image) can read the files mounted from it. Each is
    set through its own descriptor: a link at either is refused, never chmod-ed through."""
    folder.ensure_dir(SECRETS_ROOT, 0o700)
    return folder.ensure_dir(SECRETS_DIR, 0o755)
