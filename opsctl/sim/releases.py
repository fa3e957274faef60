"""How each pinned sglang release resolves the settings `opsctl verify` checks, for the simulator.

The real server fills in a default when a flag is absent (and for a DSA model overrides a few
even when given); /server_info and /model_info then report the resolved value. This table says,
per release and setting, where the value is reported, which flag sets it and what the release
resolves without it, read from the release wheels (paths under ``sglang/srt/``).

opsctl.verify keeps the same facts for the checking side; the simulator may not import it (it
runs with the standard library alone), so ``tests/component/test_sim_releases.py`` holds the two
tables together, and ``tests/unit/test_release_tables_vs_records.py`` holds both to the
release's own resolution of every profile variant (``opsctl profile resolve``'s records, which
the simulator reports directly for exactly such an argv: opsctl.sim.records). Where the real
default depends on the GPU or the checkpoint, the verify table says so and the simulator
computes it for its simulated device: the profile's target card, an RTX PRO 6000 Blackwell
(sm_120, 96 GB), and a GLM-5 checkpoint unless the model path holds a config.json that says
otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

RELEASE_ENV = "OPSCTL_SIM_SGLANG_VERSION"
DEFAULT_RELEASE = "0.5.23"
SIM_SM_MAJOR = 12
SIM_GPU_MEMORY_GIB = 96
SIM_ARCHITECTURE = "GlmMoeDsaForCausalLM"
# MLA + DSA indexer models (0.5.23 configs/model_config.py:191-212 is_deepseek_dsa), as far
# as opsctl deploys them.
DSA_ARCHITECTURES = frozenset({"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"})

Endpoint = Literal["server_info", "model_info"]


@dataclass(frozen=True)
class Required:
    """A flag without a default (the server does not start without it)."""


@dataclass(frozen=True)
class Same:
    """Defaults to another setting's resolved value."""

    field: str


@dataclass(frozen=True)
class OnDevice:
    """Depends on the GPU or the checkpoint; `rule` names how the simulator computes it."""

    rule: str


@dataclass(frozen=True)
class ByKv:
    """Depends on the resolved kv_cache_dtype."""

    fp8: Any
    bf16: Any


@dataclass(frozen=True)
class SimField:
    endpoint: Endpoint
    key: tuple[str, ...]  # path into that endpoint's JSON
    flag: str  # the spelling in this release's parser
    default: Any  # a literal, Required, Same, OnDevice or ByKv
    dsa_only: bool = False  # the default applies to DSA models only
    forced: bool = False  # the release sets it for a DSA model even when the flag is given
    unset: tuple[str, ...] = ()  # given values the release treats like an absent flag
    aliases: Mapping[str, str] = field(default_factory=dict)  # spellings it normalises (DSA)


# The same in every release: "auto" (the flag's default) asks for the DSA default.
_KV_CACHE_DTYPE = SimField("server_info", ("kv_cache_dtype",), "--kv-cache-dtype",
                           OnDevice("kv_cache_dtype"), dsa_only=True, unset=("auto",),
                           aliases={"bf16": "bfloat16"})

# Rows the same in every release (where the value sits, its flag, its default).
_MODEL_PATH = SimField("model_info", ("model_path",), "--model-path", Required())
_TP_SIZE = SimField("server_info", ("tp_size",), "--tp-size", 1)
_QUANTIZATION = SimField("server_info", ("quantization",), "--quantization", OnDevice("quantization"))
# From 0.5.15 on: the dsa attention default, the --dsa-* spelling, and the per-phase graph cap.
_DSA_ATTENTION = SimField("server_info", ("attention_backend",), "--attention-backend", "dsa",
                          dsa_only=True)
_CUDA_GRAPH_DECODE_MAX_BS = SimField("server_info", ("cuda_graph_config", "decode", "max_bs"),
                                     "--cuda-graph-max-bs-decode",
                                     OnDevice("cuda_graph_max_bs_capped"))


def _dsa_backends(fp8_rule: str) -> dict[str, SimField]:
    """Both DSA backends as 0.5.15 and later report them: FP8 KV by `fp8_rule`, BF16 alike."""
    return {
        "dsa_prefill_backend": SimField("server_info", ("dsa_prefill_backend",),
                                        "--dsa-prefill-backend",
                                        ByKv(fp8=OnDevice(fp8_rule), bf16="flashmla_sparse"),
                                        dsa_only=True),
        "dsa_decode_backend": SimField("server_info", ("dsa_decode_backend",),
                                       "--dsa-decode-backend",
                                       ByKv(fp8=OnDevice(fp8_rule),
                                            bf16=OnDevice("dsa_decode_bf16")),
                                       dsa_only=True),
    }

RELEASES: dict[str, dict[str, SimField]] = {
    "0.5.15": {
        "model_path": _MODEL_PATH,
        "served_model_name": SimField("server_info", ("served_model_name",),
                                      "--served-model-name", Same("model_path")),
        "tp_size": _TP_SIZE,
        "quantization": _QUANTIZATION,
        "kv_cache_dtype": _KV_CACHE_DTYPE,
        "attention_backend": _DSA_ATTENTION,
        **_dsa_backends("dsa_fp8_no_sm120"),
        "page_size": SimField("server_info", ("page_size",), "--page-size", 64, dsa_only=True,
                              forced=True),
        "cuda_graph_max_bs": _CUDA_GRAPH_DECODE_MAX_BS,
    },
    "0.5.23": {
        "model_path": _MODEL_PATH,
        "served_model_name": SimField("model_info", ("served_model_name",),
                                      "--served-model-name", Same("model_path")),
        "tp_size": _TP_SIZE,
        "quantization": _QUANTIZATION,
        "kv_cache_dtype": _KV_CACHE_DTYPE,
        "attention_backend": _DSA_ATTENTION,
        **_dsa_backends("dsa_fp8"),
        "page_size": SimField("server_info", ("page_size",), "--page-size",
                              OnDevice("page_size_kpool"), dsa_only=True, forced=True),
        "cuda_graph_max_bs": _CUDA_GRAPH_DECODE_MAX_BS,
    },
}


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


def _on_device(rule: str, release: str, resolved: Mapping[str, Any], raw: Mapping[str, Any],
               checkpoint: Checkpoint) -> Any:
    """The device- or checkpoint-dependent defaults, computed for the simulated device."""
    if rule == "quantization":
        # Only SM100 reads the checkpoint's quant_method (0.5.23 arg_groups/overrides.py:808-809);
        # elsewhere it stays unset.
        return None
    if rule == "kv_cache_dtype":
        # fp8_e4m3 from SM10 on, bfloat16 below or with learnable sinks (0.5.23
        # arg_groups/overrides.py:531-537).
        # 0.5.15 has no sinks rule (arg_groups/overrides.py:1083-1086).
        sinks = release == "0.5.23" and bool(checkpoint.config.get("learnable_sink"))
        return "fp8_e4m3" if SIM_SM_MAJOR >= 10 and not sinks else "bfloat16"
    if rule == "dsa_fp8":
        # GLM on SM12x: flashinfer_sparse_mla (0.5.23 arg_groups/overrides.py:637-675); other
        # Blackwell trtllm, Hopper flashmla_kv (overrides.py:714-720).
        if checkpoint.architecture == "GlmMoeDsaForCausalLM" and SIM_SM_MAJOR == 12:
            return "flashinfer_sparse_mla"
        return "trtllm" if SIM_SM_MAJOR >= 10 else "flashmla_kv"
    if rule == "dsa_fp8_no_sm120":
        # 0.5.15 has no GLM/SM12x case: trtllm from SM10 on, flashmla_kv below
        # (arg_groups/overrides.py:1140-1145).
        return "trtllm" if SIM_SM_MAJOR >= 10 else "flashmla_kv"
    if rule == "dsa_decode_bf16":
        # 0.5.23 arg_groups/overrides.py:721-726.
        return "trtllm" if SIM_SM_MAJOR >= 10 else "fa3"
    if rule == "page_size_kpool":
        # 64 x index_kpool (1 when the config has none): 0.5.23
        # model_overrides/deepseek_v2.py:162-172.
        return 64 * int(checkpoint.config.get("index_kpool", 1))
    if rule.startswith("cuda_graph_max_bs"):
        # 90-160 GiB cards: 256 below TP4, else 512 (0.5.23
        # arg_groups/memory_hook.py:146-159); 0.5.23 caps the default at --max-running-requests
        # (memory_hook.py:183-188).
        if not 90 <= SIM_GPU_MEMORY_GIB < 160:
            raise ValueError(f"no cuda graph default recorded for {SIM_GPU_MEMORY_GIB} GiB")
        value = 256 if int(resolved["tp_size"]) < 4 else 512
        running = raw.get("max_running_requests")
        if rule.endswith("_capped") and running is not None and int(running) < value:
            value = int(running)
        return value
    raise ValueError(f"unknown default rule {rule!r}")


def resolve(release: str, raw: Mapping[str, Any], checkpoint: Checkpoint) -> dict[str, Any]:
    """field -> the value the release reports for these flags on the simulated device.

    ``raw`` holds the given flags as the simulator parsed them, values already typed.
    """
    resolved: dict[str, Any] = {}
    for name, fact in RELEASES[release].items():
        given = raw.get(flag_key(fact.flag))
        applies = checkpoint.dsa or not fact.dsa_only
        if given is not None and given not in fact.unset and not (applies and fact.forced):
            resolved[name] = fact.aliases.get(given, given) if applies else given
            continue
        if not applies:
            resolved[name] = given
            continue
        default = fact.default
        if isinstance(default, ByKv):
            default = default.fp8 if resolved.get("kv_cache_dtype") == "fp8_e4m3" else default.bf16
        if isinstance(default, Same):
            resolved[name] = resolved[default.field]
        elif isinstance(default, OnDevice):
            resolved[name] = _on_device(default.rule, release, resolved, raw, checkpoint)
        elif isinstance(default, Required):
            resolved[name] = given
        else:
            resolved[name] = default
    return resolved
