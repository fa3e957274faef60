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

The defaults below are those of a DSA model (GLM-5, ``GlmMoeDsaForCausalLM``; the set is
opsctl.config.releases.DSA_ARCHITECTURES) on CUDA; where they depend on the GPU or the
checkpoint the entry says on what, and the profile must state the value it expects.
``opsctl.sim.releases`` keeps the simulator's copy of this table
(``tests/component/test_sim_releases.py`` holds the two together). For a variant of a profile
under deploy/, verify expects its record instead (the release's own resolution, ``opsctl profile
resolve``); these defaults serve argvs without a current record, and
``tests/unit/test_release_tables_vs_records.py`` checks them against every record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

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


_KV_DSA = "DSA: fp8_e4m3 from SM10 on, bfloat16 below"
_CUDA_GRAPH = "GPU memory and tp_size: 512 with tp_size >= 4 on a 90-160 GiB card, 256 below TP4"

RELEASE_FACTS: dict[str, dict[str, FieldFact]] = {
    "0.5.15": {
        "model_path": FieldFact(
            "model_info", ("model_path",), "--model-path", Required(),
            "server_args.py:410-414, http_server.py:670"),
        "served_model_name": FieldFact(
            "server_info", ("served_model_name",), "--served-model-name", SameAs("model_path"),
            "server_args.py:1016, default server_args.py:3018-3019"),
        "tp_size": FieldFact(
            "server_info", ("tp_size",), "--tp-size", Fixed(1), "server_args.py:816-820",
            integer=True),
        "quantization": FieldFact(
            "server_info", ("quantization",), "--quantization",
            Depends("SM100 takes the checkpoint's quant_method, other GPUs leave it None"),
            "server_args.py:538-542, SM100 default arg_groups/overrides.py "
            "_deepseek_moe_quant_resolution"),
        "kv_cache_dtype": FieldFact(
            "server_info", ("kv_cache_dtype",), "--kv-cache-dtype", Depends(_KV_DSA),
            "server_args.py:558-562, DSA default arg_groups/overrides.py:1052-1090",
            dsa_only=True, unset=("auto",), aliases={"bf16": "bfloat16"}),
        "attention_backend": FieldFact(
            "server_info", ("attention_backend",), "--attention-backend", Fixed("dsa"),
            "server_args.py:1277-1282, DSA default arg_groups/overrides.py:326-329",
            dsa_only=True),
        "dsa_prefill_backend": FieldFact(
            "server_info", ("dsa_prefill_backend",), "--dsa-prefill-backend",
            ByKv(fp8=Depends("FP8 KV: trtllm from SM10 on, flashmla_kv below"),
                 bf16=Fixed("flashmla_sparse")),
            "server_args.py:1361, default arg_groups/overrides.py:1100-1155", dsa_only=True),
        "dsa_decode_backend": FieldFact(
            "server_info", ("dsa_decode_backend",), "--dsa-decode-backend",
            ByKv(fp8=Depends("FP8 KV: trtllm from SM10 on, flashmla_kv below"),
                 bf16=Depends("bfloat16 KV: trtllm from SM10 on, fa3 below")),
            "server_args.py:1369, default arg_groups/overrides.py:1100-1155", dsa_only=True),
        "page_size": FieldFact(
            "server_info", ("page_size",), "--page-size", Fixed(64),
            "server_args.py:719-722, DSA on CUDA arg_groups/overrides.py:374-386", integer=True,
            dsa_only=True, forced=True),
        "cuda_graph_max_bs": FieldFact(
            "server_info", ("cuda_graph_config", "decode", "max_bs"),
            "--cuda-graph-max-bs-decode",
            Depends(_CUDA_GRAPH + "; capped at --max-running-requests"),
            "server_args.py:1424-1427, folded by server_args.py:3179 "
            "(_handle_cuda_graph_config)", integer=True),
    },
    "0.5.23": {
        "model_path": FieldFact(
            "model_info", ("model_path",), "--model-path", Required(),
            "arg_groups/fields/model.py:51-57, http_server.py:816"),
        "served_model_name": FieldFact(
            "model_info", ("served_model_name",), "--served-model-name", SameAs("model_path"),
            "arg_groups/fields/serving.py:168-171, default arg_groups/serving_hook.py:642-647"),
        "tp_size": FieldFact(
            "server_info", ("tp_size",), "--tp-size", Fixed(1),
            "arg_groups/fields/parallel.py:45-51", integer=True),
        "quantization": FieldFact(
            "server_info", ("quantization",), "--quantization",
            Depends("SM100 takes the checkpoint's quant_method, other GPUs leave it None"),
            "arg_groups/fields/model.py:177-184, SM100 default arg_groups/overrides.py:787-809"),
        "kv_cache_dtype": FieldFact(
            "server_info", ("kv_cache_dtype",), "--kv-cache-dtype",
            Depends(_KV_DSA + " or with learnable attention sinks"),
            "arg_groups/fields/model.py:197-221, DSA default arg_groups/overrides.py:531-545",
            dsa_only=True, unset=("auto",), aliases={"bf16": "bfloat16"}),
        "attention_backend": FieldFact(
            "server_info", ("attention_backend",), "--attention-backend", Fixed("dsa"),
            "arg_groups/fields/exec_.py:207-214, DSA default "
            "arg_groups/model_overrides/deepseek_v2.py:101-103", dsa_only=True),
        "dsa_prefill_backend": FieldFact(
            "server_info", ("dsa_prefill_backend",), "--dsa-prefill-backend",
            ByKv(fp8=Depends("FP8 KV: flashinfer_sparse_mla for GLM on SM12x, trtllm on other "
                             "SM10+, flashmla_kv below"),
                 bf16=Fixed("flashmla_sparse")),
            "arg_groups/fields/exec_.py:299-319, default arg_groups/overrides.py:637-675, "
            "714-726", dsa_only=True),
        "dsa_decode_backend": FieldFact(
            "server_info", ("dsa_decode_backend",), "--dsa-decode-backend",
            ByKv(fp8=Depends("FP8 KV: flashinfer_sparse_mla for GLM on SM12x, trtllm on other "
                             "SM10+, flashmla_kv below"),
                 bf16=Depends("bfloat16 KV: trtllm from SM10 on, fa3 below")),
            "arg_groups/fields/exec_.py:341-360, default arg_groups/overrides.py:637-675, "
            "714-726", dsa_only=True),
        "page_size": FieldFact(
            "server_info", ("page_size",), "--page-size",
            Depends("64 x the checkpoint's index_kpool (1 when its config has none)"),
            "arg_groups/fields/schedule.py:143-145, DSA on CUDA "
            "arg_groups/model_overrides/deepseek_v2.py:162-172", integer=True, dsa_only=True,
            forced=True),
        "cuda_graph_max_bs": FieldFact(
            "server_info", ("cuda_graph_config", "decode", "max_bs"),
            "--cuda-graph-max-bs-decode",
            Depends(_CUDA_GRAPH + "; capped at --max-running-requests"),
            "arg_groups/fields/exec_.py:629-631 folded by arg_groups/cuda_graph_hook.py:72-73, "
            "default arg_groups/memory_hook.py:89-188", integer=True),
    },
}
# The release itself: both report it as /server_info "version" (http_server.py:721 in 0.5.15,
# :888 in 0.5.23).
VERSION_KEY = ("version",)


def facts_for(version: str) -> dict[str, FieldFact] | None:
    return RELEASE_FACTS.get(version)
