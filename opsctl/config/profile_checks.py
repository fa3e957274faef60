"""The checks a profile's values must pass beyond their types, kept apart from the models.

- names: a profile's `name` becomes a file name (deploy/locks/<name>.json), a container name and
  a label, so it is one safe path component;
- addresses and sizes: what Docker would refuse client-side (after opsctl touched something)
  is refused when the profile loads;
- secrets: a profile names a secret by the host's environment variable, never by value; a
  secret-looking container variable with a literal value (named like TOKEN, SECRET, PASSWORD,
  PASS, AUTH, API_KEY, ...), a value shaped like an access token (hf_..., sk-..., ghp_...: core.
  redact.SECRET_VALUE) under any name or in `extra_args`, or a secret flag in `extra_args`, is
  refused;
- `extra_args` may not repeat a flag a typed field renders (nor an argparse abbreviation or alias
  of one): argparse keeps the last value, so the server would silently listen elsewhere.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from opsctl.argspec.spec import ArgSpec
from opsctl.core.redact import SECRET_VALUE

NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Docker's size strings (docker-py parse_bytes): digits, then b, k, m or g.
SIZE_RE = re.compile(r"[0-9]+[bkmgBKMG]?")
MAX_STOP_GRACE_SECONDS = 3600
# Readiness: a day of loading at most (`up --timeout` too); a poll at most a minute apart.
MAX_READINESS_SECONDS = 86400
MAX_POLL_SECONDS = 60
# A variable, build arg or flag with such a name carries a secret; one that names a file or a
# folder holding it (HF_TOKEN_PATH, ..._FILE) does not.
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIALS?|PRIVATE_?KEY)(_|$)"
                         r"|(^|_)(PASS|PWD|AUTH)(_|$)", re.I)  # PASS/AUTH as a word: not BYPASS
_NAMES_A_FILE = re.compile(r"_(FILE|PATH|DIR)$", re.I)
# A flag whose value is a secret: sglang's --api-key, --admin-api-key, --ssl-keyfile-password
# (its many --*-token-* flags are sizes and counts, so only the last word counts).
_SECRET_FLAG = re.compile(r"-(api-?key|password|passwd|secret|credentials?|private-?key|token)$")


def is_secret_name(name: str) -> bool:
    """Whether a variable or build arg is named like a secret."""
    return bool(SECRET_NAME.search(name)) and not _NAMES_A_FILE.search(name)


def secret_value_problem(value: str) -> str | None:
    """Why a value looks like an access token (core.redact.SECRET_VALUE: hf_..., sk-..., ghp_...),
    never quoting it; None when it does not."""
    found = SECRET_VALUE.search(value)
    if found is None:
        return None
    return f"holds what looks like an access token ({found[0][:3]}...)"


def check_name(value: str) -> str:
    if not NAME_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a profile name: 1-63 of a-z 0-9 . _ -, starting "
                         "with a letter or digit (it names the lock file and the container)")
    return value


def check_env_name(value: str) -> str:
    if not ENV_NAME_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not an environment variable name")
    return value


def check_address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address (e.g. 127.0.0.1)") from None


def check_size(value: str | None) -> str | None:
    if value is not None and not SIZE_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a Docker size: digits, then b, k, m or g (e.g. 32g)")
    return value


def size_bytes(value: str) -> int:
    """A Docker size (SIZE_RE) in bytes: b, k, m, g are powers of 1024, as Docker reads them."""
    unit = value[-1].lower() if value[-1].isalpha() else "b"
    return int(value.rstrip("bkmgBKMG")) * 1024 ** "bkmg".index(unit)


def no_literal_secrets(env: dict[str, str]) -> dict[str, str]:
    """Refuse a secret-looking variable with a literal value: it would show in `docker inspect`,
    `profile show` and `up --dry-run`."""
    for name, value in env.items():
        problem = secret_value_problem(value) if isinstance(value, str) else None
        if is_secret_name(name) or problem:
            why = f"{name} {problem}" if problem else f"{name} looks like a secret"
            raise ValueError(f"{why}; a profile never holds one in clear: list {name} under "
                             "container.env_from_host to copy the host's variable at launch")
    return env


def env_names(names: list[str]) -> list[str]:
    for name in names:
        check_env_name(name)
    if len(set(names)) != len(names):
        raise ValueError("a variable is listed twice")
    return names


def _resolve(token: str, spec: ArgSpec) -> str | None:
    """The option string argparse takes `token` for: itself, or the one option it abbreviates."""
    flag = token.split("=", 1)[0]
    options = spec.option_strings()
    if flag in options:
        return flag
    if not flag.startswith("--") or not spec.parser.get("allow_abbrev", True):
        return None
    matches = [option for option in options if option.startswith(flag)]
    return matches[0] if len(matches) == 1 else None


def extra_args_problem(extra_args: Iterable[str], owned: dict[str, str], spec: ArgSpec
                       ) -> tuple[str, str] | None:
    """(problem, hint) for the first extra arg that passes a secret or repeats a typed field's
    flag; `owned` maps each flag a typed field renders to that field. None when all are fine."""
    aliases = {option: action["option_strings"] for action in spec.actions
               for option in action["option_strings"]}
    field_of = {
        alias: field for flag, field in owned.items() for alias in aliases.get(flag, [flag])
    }
    for token in extra_args:
        if secret_value_problem(token):
            return (f"extra_args {secret_value_problem(token)}: it would show in clear in the "
                    "profile, `docker inspect` and `profile show`",
                    "name it by environment variable instead: server.api_key_env, or "
                    "container.env_from_host for a variable the server reads")
        if not token.startswith("-"):
            continue
        written = token.split("=", 1)[0]  # never the value: it may be the secret
        flag = _resolve(written, spec) or written
        shown = f"{written!r}" + (f" (argparse reads it as {flag})" if flag != written else "")
        if _SECRET_FLAG.search(flag):
            return (f"extra_args {shown} would put a secret in clear into the profile, "
                    "`docker inspect` and `profile show`",
                    "name it by environment variable instead: server.api_key_env / "
                    "server.admin_api_key_env: NAME (the value is read from the host at launch)")
        if flag in field_of:
            return (f"extra_args {shown} repeats the flag that {field_of[flag]} renders "
                    "(argparse keeps the last one, silently)",
                    f"set {field_of[flag]} instead")
    return None
