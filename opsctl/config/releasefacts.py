"""Where each pinned sglang release reports the settings opsctl checks, and what it resolves
when their flag is absent: read from the release wheels, never assumed.

Paths are under ``sglang/srt/`` of ``sglang-<version>`` from PyPI; re-read them when a pin
moves. How the endpoints are built:

- 0.5.15: ``/model_info`` (``entrypoints/http_server.py:665-682``) has model_path,
  tokenizer_path and the HF architecture, no served name; ``/server_info``
  (``http_server.py:705-725``) is ``dataclasses.asdict(server_args)`` plus the scheduler info,
  internal states and ``version``; with 0.5.23's spellings: ``dsa_*`` backends and
  ``cuda_graph_config.decode.max_bs``; its DSA defaults have no SM12x GLM case
  (``arg_groups/overrides.py:1100-1155``). Checked against a real 0.5.15 server's responses
  on an H200 (``tests/fixtures/real-sglang-0.5.15/``).
- 0.5.23: ``/model_info`` (``http_server.py:812-850``) also carries ``served_model_name``, "where
  a client reads the identity the server answers under"; ``/server_info``
  (``http_server.py:863-893``) is ``build_server_info`` (``utils/common.py:3584-3593``):
  ``server_args.resolved_dict()`` (``server_args.py:316-333``, the last resolution declaration
  of each field, else its input) plus ``launch_command``, ``startup_time``, ``version``.

The table itself is data, one file per release: ``patches/sglang/<version>/defaults.json``
(``DEFAULTS_FILE``), read here and by the simulator (``opsctl.sim.releases``, which cannot import
this module; the simulator image carries the files beside the resolution records). Each setting
says where the release reports it (endpoint, key), its flag, its default when the flag is absent
(``value``, ``same_as``, ``required``, ``depends`` with the simulator's ``sim_rule``, or ``fp8``
and ``bf16`` by the resolved KV dtype), where that was read (``source``) and how it is compared.
The defaults are those of a DSA model (GLM-5, ``GlmMoeDsaForCausalLM``; the set is
opsctl.config.releases.DSA_ARCHITECTURES) on CUDA; where they depend on the GPU or the
checkpoint the entry says on what, and the profile must state the value it expects. For a
variant of a profile under deploy/, verify expects its record instead (the release's own
resolution, ``opsctl profile resolve``); these defaults serve argvs without a current record,
and ``tests/unit/test_release_tables_vs_records.py`` checks them against every record.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from opsctl.argspec.spec import VERSION_RE
from opsctl.core.paths import release_dir

Endpoint = Literal["server_info", "model_info"]
Value = str | int | None


@dataclass(frozen=True)
class Fixed:
    value: Value


@dataclass(frozen=True)
class SameAs:
    """The resolved value of another field."""

    field: str


@dataclass(frozen=True)
class Required:
    """No default: the server does not start without the flag."""


@dataclass(frozen=True)
class Depends:
    """Depends on the GPU or the checkpoint: the profile states what it expects."""

    on: str


@dataclass(frozen=True)
class ByKv:
    """Depends on the resolved kv_cache_dtype (fp8_e4m3 or bfloat16 for a DSA model)."""

    fp8: Fixed | Depends
    bf16: Fixed | Depends


Default = Fixed | SameAs | Required | Depends | ByKv


@dataclass(frozen=True)
class FieldFact:
    endpoint: Endpoint
    key: tuple[str, ...]  # path into that endpoint's JSON object
    flag: str  # the flag's spelling in this release's parser
    default: Default  # what the release resolves when the flag is absent
    source: str  # file:line of the field and its default
    integer: bool = False  # the flag takes an integer
    dsa_only: bool = False  # the default is the DSA model's; other models resolve otherwise
    forced: bool = False  # a DSA model gets the default even when the flag is given
    unset: tuple[str, ...] = ()  # given values the release treats like an absent flag
    aliases: Mapping[str, str] = field(default_factory=dict)  # spellings a DSA model normalises


DEFAULTS_FILE = "defaults.json"  # in a release's folder (opsctl.sim.releases reads the same)


def _default(data: Mapping[str, Any]) -> Default:
    if "fp8" in data:
        fp8, bf16 = _default(data["fp8"]), _default(data["bf16"])
        assert isinstance(fp8, Fixed | Depends) and isinstance(bf16, Fixed | Depends)
        return ByKv(fp8=fp8, bf16=bf16)
    if "same_as" in data:
        return SameAs(data["same_as"])
    if data.get("required"):
        return Required()
    if "depends" in data:
        return Depends(data["depends"])
    return Fixed(data["value"])


def _fact(data: Mapping[str, Any]) -> FieldFact:
    return FieldFact(
        endpoint=data["endpoint"], key=tuple(data["key"]), flag=data["flag"],
        default=_default(data["default"]), source=data["source"],
        integer=data.get("integer", False), dsa_only=data.get("dsa_only", False),
        forced=data.get("forced", False), unset=tuple(data.get("unset", ())),
        aliases=dict(data.get("aliases", {})))


# The release itself: both report it as /server_info "version" (http_server.py:721 in 0.5.15,
# :888 in 0.5.23).
VERSION_KEY = ("version",)


@functools.cache
def facts_for(version: str) -> dict[str, FieldFact] | None:
    """The release's table (setting -> fact), or None when no release folder records one."""
    if not VERSION_RE.match(version):
        return None
    path = release_dir(version) / DEFAULTS_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return {name: _fact(row) for name, row in data["settings"].items()}
