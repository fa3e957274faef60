"""How each pinned sglang release resolves the settings `opsctl verify` checks, for the simulator.

The real server fills in a default when a flag is absent (and for a DSA model overrides a few
even when given); /server_info and /model_info then report the resolved value. Which settings,
where each is reported, which flag sets it and what the release resolves without it is one table
per release, read from the release wheels: ``patches/sglang/<release>/defaults.json``, the file
opsctl.config.releasefacts reads for verify (the simulator cannot import it: it runs with the
standard library alone). The files sit under the same root as the resolution records
(opsctl.sim.records.RECORDS_ROOT; the simulator image carries both), and
``tests/unit/test_release_tables_vs_records.py`` holds the table, and what the simulator computes
from it, to the release's own resolution of every profile variant. Where the real default
depends on the GPU or the checkpoint, the table says so and names the rule (``sim_rule``) by
which the simulator computes it for its simulated device: the profile's target card, an RTX PRO
6000 Blackwell (sm_120, 96 GB), and a GLM-5 checkpoint unless the model path holds a config.json
that says otherwise.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsctl.sim import records

RELEASE_ENV = "OPSCTL_SIM_SGLANG_VERSION"
DEFAULT_RELEASE = "0.5.23"
SIM_SM_MAJOR = 12
SIM_GPU_MEMORY_GIB = 96
SIM_ARCHITECTURE = "GlmMoeDsaForCausalLM"
# MLA + DSA indexer models (0.5.23 configs/model_config.py:191-212 is_deepseek_dsa), as far
# as opsctl deploys them.
DSA_ARCHITECTURES = frozenset({"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"})

DEFAULTS_FILE = "defaults.json"  # opsctl.config.releasefacts.DEFAULTS_FILE, in a release's folder


@dataclass(frozen=True)
class Setting:
    """One row of a release's table (defaults.json)."""

    endpoint: str  # server_info or model_info
    key: tuple[str, ...]  # path into that endpoint's JSON
    flag: str  # the spelling in this release's parser
    default: Mapping[str, Any]  # value, same_as, required, sim_rule, or fp8/bf16 of those
    dsa_only: bool = False  # the default applies to DSA models only
    forced: bool = False  # the release sets it for a DSA model even when the flag is given
    unset: tuple[str, ...] = ()  # given values the release treats like an absent flag
    aliases: Mapping[str, str] = field(default_factory=dict)  # spellings it normalises (DSA)


@functools.cache
def _table(root: Path, release: str) -> dict[str, Setting]:
    data = json.loads((root / release / DEFAULTS_FILE).read_text(encoding="utf-8"))
    return {name: Setting(endpoint=row["endpoint"], key=tuple(row["key"]), flag=row["flag"],
                          default=row["default"], dsa_only=row.get("dsa_only", False),
                          forced=row.get("forced", False), unset=tuple(row.get("unset", ())),
                          aliases=row.get("aliases", {}))
            for name, row in data["settings"].items()}


def table(release: str) -> dict[str, Setting]:
    """setting -> its row, for a release that `releases()` lists."""
    return _table(records.RECORDS_ROOT, release)


def releases() -> list[str]:
    """The releases with a table, oldest first."""
    found = [path.parent.name for path in records.RECORDS_ROOT.glob(f"*/{DEFAULTS_FILE}")]
    return sorted(found, key=lambda v: [int(p) if p.isdigit() else 0 for p in v.split(".")])


def flag_key(flag: str) -> str:
    """The key the simulator's flag parser files a flag under (``--tp-size`` -> ``tp_size``)."""
    return flag[2:].replace("-", "_")


@dataclass(frozen=True)
class Checkpoint:
    """What the simulator knows of the model: its config.json, or GLM-5 when there is none."""

    config: Mapping[str, Any]

    @property
    def architecture(self) -> str:
        architectures = self.config.get("architectures") or [SIM_ARCHITECTURE]
        return str(architectures[0])

    @property
    def dsa(self) -> bool:
        return self.architecture in DSA_ARCHITECTURES


@dataclass(frozen=True)
class _Device:
    """What a device-dependent default may read: the release, the flags as resolved so far and
    as given, and the checkpoint."""

    release: str
    resolved: Mapping[str, Any]
    raw: Mapping[str, Any]
    checkpoint: Checkpoint


def _quantization(device: _Device) -> Any:
    # Only SM100 reads the checkpoint's quant_method (0.5.23 arg_groups/overrides.py:808-809);
    # elsewhere it stays unset.
    return None


def _kv_cache_dtype(device: _Device) -> str:
    # fp8_e4m3 from SM10 on, bfloat16 below or with learnable sinks (0.5.23
    # arg_groups/overrides.py:531-537).
    # 0.5.15 has no sinks rule (arg_groups/overrides.py:1083-1086).
    sinks = device.release == "0.5.23" and bool(device.checkpoint.config.get("learnable_sink"))
    return "fp8_e4m3" if SIM_SM_MAJOR >= 10 and not sinks else "bfloat16"


def _dsa_fp8(device: _Device) -> str:
    # GLM on SM12x: flashinfer_sparse_mla (0.5.23 arg_groups/overrides.py:637-675); other
    # Blackwell trtllm, Hopper flashmla_kv (overrides.py:714-720).
    if device.checkpoint.architecture == "GlmMoeDsaForCausalLM" and SIM_SM_MAJOR == 12:
        return "flashinfer_sparse_mla"
    return _dsa_fp8_no_sm120(device)


def _dsa_fp8_no_sm120(device: _Device) -> str:
    # 0.5.15 has no GLM/SM12x case: trtllm from SM10 on, flashmla_kv below
    # (arg_groups/overrides.py:1140-1145).
    return "trtllm" if SIM_SM_MAJOR >= 10 else "flashmla_kv"


def _dsa_decode_bf16(device: _Device) -> str:
    # 0.5.23 arg_groups/overrides.py:721-726.
    return "trtllm" if SIM_SM_MAJOR >= 10 else "fa3"


def _page_size_kpool(device: _Device) -> int:
    # 64 x index_kpool (1 when the config has none): 0.5.23
    # model_overrides/deepseek_v2.py:162-172.
    return 64 * int(device.checkpoint.config.get("index_kpool", 1))


def _cuda_graph_max_bs(device: _Device) -> int:
    # 90-160 GiB cards: 256 below TP4, else 512 (0.5.23 arg_groups/memory_hook.py:146-159).
    if not 90 <= SIM_GPU_MEMORY_GIB < 160:
        raise ValueError(f"no cuda graph default recorded for {SIM_GPU_MEMORY_GIB} GiB")
    return 256 if int(device.resolved["tp_size"]) < 4 else 512


def _cuda_graph_max_bs_capped(device: _Device) -> int:
    # 0.5.23 caps the default at --max-running-requests (memory_hook.py:183-188).
    value = _cuda_graph_max_bs(device)
    running = device.raw.get("max_running_requests")
    return min(value, int(running)) if running is not None else value


# sim_rule (patches/sglang/<version>/defaults.json) -> the default on the simulated device.
_RULES: dict[str, Callable[[_Device], Any]] = {
    "quantization": _quantization,
    "kv_cache_dtype": _kv_cache_dtype,
    "dsa_fp8": _dsa_fp8,
    "dsa_fp8_no_sm120": _dsa_fp8_no_sm120,
    "dsa_decode_bf16": _dsa_decode_bf16,
    "page_size_kpool": _page_size_kpool,
    "cuda_graph_max_bs": _cuda_graph_max_bs,
    "cuda_graph_max_bs_capped": _cuda_graph_max_bs_capped,
}


def _on_device(rule: str, release: str, resolved: Mapping[str, Any], raw: Mapping[str, Any],
               checkpoint: Checkpoint) -> Any:
    """The device- or checkpoint-dependent defaults, computed for the simulated device."""
    if rule not in _RULES:
        raise ValueError(f"unknown default rule {rule!r}")
    return _RULES[rule](_Device(release, resolved, raw, checkpoint))


def resolve(release: str, raw: Mapping[str, Any], checkpoint: Checkpoint) -> dict[str, Any]:
    """field -> the value the release reports for these flags on the simulated device.

    ``raw`` holds the given flags as the simulator parsed them, values already typed.
    """
    resolved: dict[str, Any] = {}
    for name, fact in table(release).items():
        given = raw.get(flag_key(fact.flag))
        applies = checkpoint.dsa or not fact.dsa_only
        if given is not None and given not in fact.unset and not (applies and fact.forced):
            resolved[name] = fact.aliases.get(given, given) if applies else given
        elif not applies:
            resolved[name] = given
        else:
            resolved[name] = _default(fact.default, given, release, resolved, raw, checkpoint)
    return resolved


def _default(spec: Mapping[str, Any], given: Any, release: str, resolved: Mapping[str, Any],
             raw: Mapping[str, Any], checkpoint: Checkpoint) -> Any:
    """What the release resolves for an absent flag, by the table's default `spec`."""
    if "fp8" in spec:
        spec = spec["fp8"] if resolved.get("kv_cache_dtype") == "fp8_e4m3" else spec["bf16"]
    if "same_as" in spec:
        return resolved[spec["same_as"]]
    if "sim_rule" in spec:
        return _on_device(spec["sim_rule"], release, resolved, raw, checkpoint)
    if spec.get("required"):
        return given
    return spec["value"]
