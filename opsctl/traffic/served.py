"""The served model name and tokenizer path: read from the server, never guessed.

/v1/models is the authority for the name clients send as `model`; sglang's /model_info says
which tokenizer the server loaded. Both smoke and bench resolve the model here, and record
where each answer came from in a `ModelResolution`.
"""

from __future__ import annotations

import asyncio
import posixpath
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

from opsctl.core.answers import Malformed, decode_json, model_ids
from opsctl.core.errors import ServerUnreachable, UsageError
from opsctl.core.redact import API_KEY_ENV
from opsctl.traffic.payload import body_message


class ModelResolution(BaseModel):
    """Which model name and tokenizer path opsctl used, and where each came from."""

    served_name: str
    served_name_source: str
    listed: list[str]
    profile_alias: str | None = None
    tokenizer_path: str | None = None
    tokenizer_source: str = "not read"
    notes: list[str] = []


def choose_served_name(
    listed: list[str], requested: str | None, profile_alias: str | None
) -> tuple[str, str, list[str]]:
    """Pick the name to send as `model` from what /v1/models lists.

    Returns (name, source, notes); raises ValueError with a user-facing message when no
    unambiguous choice exists. A single listed model is used whatever it is called (a path,
    or a name that differs from the profile's alias): the server is the authority.
    """
    notes: list[str] = []
    if not listed:
        raise ValueError("/v1/models lists no model")
    if requested:
        if requested in listed:
            return requested, "--model, listed by /v1/models", notes
        raise ValueError(f"--model {requested!r} is not served; /v1/models lists: {_names(listed)}")
    if len(listed) == 1:
        name = listed[0]
        if profile_alias and profile_alias != name:
            notes.append(
                f"the server serves {name!r}, not the profile's alias {profile_alias!r}; "
                f"used the served name"
            )
        return name, "the only model listed by /v1/models", notes
    if profile_alias and profile_alias in listed:
        return profile_alias, "profile served_name, listed by /v1/models", notes
    why = f"none is the profile's alias {profile_alias!r}" if profile_alias else "which one?"
    raise ValueError(f"/v1/models lists {len(listed)} models ({_names(listed)}); {why}")


def _names(listed: list[str]) -> str:
    return ", ".join(repr(name) for name in listed)


async def list_models(client: httpx.AsyncClient, timeout_s: float) -> list[str]:
    """GET /v1/models -> ids. Raises ServerUnreachable, or ValueError for a bad answer."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/v1/models")
    except httpx.ConnectError as exc:
        raise ServerUnreachable(
            f"no server answers at {client.base_url}: {exc}",
            hint="is it running? `opsctl status`, or check --base-url",
        ) from None
    except (TimeoutError, httpx.TimeoutException):
        raise ValueError(f"GET /v1/models did not answer within {timeout_s:g}s") from None
    except httpx.HTTPError as exc:  # closed without answering, oversized, undecodable
        raise ValueError(f"GET /v1/models: {type(exc).__name__}: {exc}") from None
    if response.status_code in (401, 403):
        raise ValueError(
            f"GET /v1/models: HTTP {response.status_code} (the server wants an API key; "
            f"set ${API_KEY_ENV})"
        )
    if response.status_code != 200:
        raise ValueError(f"GET /v1/models: HTTP {response.status_code}: "
                         f"{body_message(response.content)}")
    try:
        return model_ids(decode_json(response.content))
    except Malformed as exc:
        raise ValueError(f"GET /v1/models: not a model list: {exc}") from None


class ModelsUnlisted(ValueError):
    """GET /v1/models gave no model list (no whole answer, an error status, a bad body, an
    empty list): the server is not serving, exit 4 in every command."""


class NameUnresolved(ValueError):
    """/v1/models listed models, but which one to send is not decided (--model, the alias)."""


async def resolve_served_name(client: httpx.AsyncClient, timeout_s: float,
                              requested: str | None, profile_alias: str | None) -> ModelResolution:
    """The one resolution of the served model name smoke and bench share: /v1/models' list,
    then `choose_served_name`. Raises ServerUnreachable, ModelsUnlisted or NameUnresolved (each
    command says what that means for it: a failed check, exit 4 or exit 2)."""
    try:
        listed = await list_models(client, timeout_s)
    except ValueError as exc:
        raise ModelsUnlisted(str(exc)) from None
    if not listed:  # a server that lists nothing serves nothing yet
        raise ModelsUnlisted("GET /v1/models lists no model")
    try:
        name, source, notes = choose_served_name(listed, requested, profile_alias)
    except ValueError as exc:
        raise NameUnresolved(str(exc)) from None
    return ModelResolution(served_name=name, served_name_source=source, listed=listed,
                           profile_alias=profile_alias, notes=notes)


async def read_model_info(
    client: httpx.AsyncClient, timeout_s: float
) -> tuple[dict[str, Any] | None, str]:
    """sglang's GET /model_info. Returns (payload, how it went); None when not sglang."""
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.get("/model_info")
    except (TimeoutError, httpx.HTTPError) as exc:
        return None, f"GET /model_info failed: {type(exc).__name__}" + (
            f": {exc}" if str(exc) else ""
        )
    if response.status_code == 404:
        return None, "the server has no /model_info (not sglang)"
    if response.status_code in (401, 403):
        return None, f"GET /model_info: HTTP {response.status_code} (API key missing or wrong)"
    if response.status_code != 200:
        return None, f"GET /model_info: HTTP {response.status_code}"
    try:
        payload = decode_json(response.content)
    except Malformed as exc:
        return None, f"GET /model_info: {exc}"
    if not isinstance(payload, dict) or "model_path" not in payload:
        return None, "GET /model_info: no model_path (not sglang)"
    return payload, "ok"


def tokenizer_from_model_info(info: dict[str, Any]) -> tuple[str | None, str]:
    """sglang's own order (benchmark/serving.py): tokenizer_path, then model_path."""
    if info.get("tokenizer_path"):
        return str(info["tokenizer_path"]), "/model_info tokenizer_path"
    if info.get("model_path"):
        return str(info["model_path"]), "/model_info model_path"
    return None, "/model_info has neither tokenizer_path nor model_path"


TOKENIZER_HINT = ("pass --tokenizer with this host's path of the model directory or its "
                  "tokenizer.json")


def host_path_of(container_path: str, mount_target: str, mount_source: str) -> Path | None:
    """`container_path` as this host sees it through a bind mount of `mount_source` at
    `mount_target`; None when it is not an absolute path under the mount (a hub id, another
    directory, or `..` climbing out of it)."""
    if not container_path.startswith("/") or not mount_target.startswith("/"):
        return None
    path, root = posixpath.normpath(container_path), posixpath.normpath(mount_target).rstrip("/")
    if path == (root or "/"):
        return Path(mount_source)
    if not path.startswith(root + "/"):
        return None
    return Path(mount_source) / path[len(root) + 1:]


def local_tokenizer(container_path: str, model_container_path: str,
                    model_host_path: str | None) -> Path:
    """The tokenizer.json of the server's tokenizer (a container path, as /model_info reports
    it), read from the host's model directory that the profile mounts there. UsageError when
    it cannot be mapped or the file is not there."""
    if model_host_path is None:
        raise UsageError(f"the server's tokenizer {container_path!r} cannot be found on this "
                         "host: the profile mounts no model.host_path", hint=TOKENIZER_HINT)
    host = host_path_of(container_path, model_container_path, model_host_path)
    if host is None:
        raise UsageError(f"the server's tokenizer {container_path!r} is not under the model "
                         f"mount {model_container_path} (model.host_path {model_host_path})",
                         hint=TOKENIZER_HINT)
    file = host / "tokenizer.json" if host.is_dir() else host
    if file.name != "tokenizer.json" or not file.is_file():
        raise UsageError(f"no tokenizer.json at {host} (this host's side of the server's "
                         f"tokenizer {container_path!r})", hint=TOKENIZER_HINT)
    return file
