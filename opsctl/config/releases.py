"""What each pinned sglang release does with a profile's settings, read from the real wheels.

Profile validation asks this module, not the user's memory, whether a variant can work on the
release it pins. Every fact carries its provenance (`file:line` under `sglang/srt/` of that
release's wheel); re-read them when a pin moves. Errors refuse the profile (exit 2); warnings are
printed by `profile show` and `up` and do not stop anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# Architectures whose attention is MLA + a DSA (sparse) indexer when the config has `index_topk`
# (0.5.23 configs/model_config.py:191-212).
DSA_ARCHITECTURES = frozenset({
    "DeepseekV32ForCausalLM",
    "GlmMoeDsaForCausalLM",
})

@dataclass(frozen=True)
class Release:
    """Facts of one sglang release that decide whether a variant can run on it."""

    version: str
    # Set when the breakable prefill CUDA graph is on by default: the DSA indexer then skips its
    # "no metadata" exit and dereferences flashinfer's missing indexer metadata at start-up.
    prefill_graph_breaks_flashinfer_dsa: str | None = None
    # The DSA backends it picks for GLM-5 + FP8 KV on SM12x when none is given.
    sm120_glm_fp8_dsa_default: str | None = None
    # DSA backends it refuses at start-up on CUDA, with where.
    cuda_refused_dsa_backends: dict[str, str] = field(default_factory=dict)
    # Set when FP8 KV with tilelang on only one of the two DSA backends is refused at start-up.
    tilelang_fp8_needs_both: str | None = None
    # Environment a GPU profile should set on SM12x: name -> (value, why, with file:line).
    sm120_env: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Flags refused at start-up beside an environment value: (flag, value, env, env value) -> why.
    refused_with_env: dict[tuple[str, str, str, str], str] = field(default_factory=dict)
    # A GET path that answers 200 once the server takes requests and 503 before, without
    # generating (a Kubernetes HTTP readiness probe); None: none known for this release.
    ready_path: str | None = None


RELEASES: dict[str, Release] = {
    "0.5.23": Release(
        version="0.5.23",
        # GET /ready: 200 when tokenizer_manager.is_ready() (not paused, status Up, not exiting),
        # else 503, with no generation (entrypoints/http_server.py:714-718,
        # managers/tokenizer_manager.py:728-734); exempt from the API key (utils/auth.py:101-105).
        ready_path="/ready",
        prefill_graph_breaks_flashinfer_dsa=(
            "sglang 0.5.23 turns the breakable prefill CUDA graph on by default "
            "(model_executor/cuda_graph_config.py:119-123); under it the DSA indexer skips its "
            "no-metadata exit and reads flashinfer's missing indexer metadata "
            "(layers/attention/dsa/dsa_prefill_cuda_graph.py:74 -> dsa_indexer.py:1951-1955), so "
            "flashinfer MLA crashes at start-up for a DSA model"
        ),
        sm120_glm_fp8_dsa_default="flashinfer_sparse_mla",  # arg_groups/overrides.py:637-674
        cuda_refused_dsa_backends={
            "triton": "sglang 0.5.23 supports the triton DSA backend on ROCm/HIP only and refuses "
            "it on CUDA at start-up (arg_groups/overrides.py:561-567)",
        },
        tilelang_fp8_needs_both=(
            "sglang 0.5.23 refuses FP8 KV with tilelang on only one DSA backend: raw and scaled "
            "FP8 rows cannot be mixed (arg_groups/overrides.py:569-575)"
        ),
        sm120_env={
            "SGLANG_ENABLE_JIT_DEEPGEMM": (
                "0",
                (
                    "sglang 0.5.23 turns DeepGEMM on for sm_120 when the installed deep_gemm "
                    "defines fp8_einsum, m_grouped_fp8_fp4_gemm_nt_contiguous and "
                    "transform_sf_into_required_layout "
                    "(layers/deep_gemm_wrapper/configurer.py:17-55), and then forces UE8M0 scales "
                    "(:58-60); the sgl-deep-gemm 0.2.3.post2 it pins defines all three "
                    "(deep_gemm/__init__.py:119,146,176), and community sm_120 "
                    "recipes turn DeepGEMM off (read from the wheels, not run on sm_120)"
                ),
            ),
        },
        refused_with_env={
            ("--fp8-gemm-backend", "deep_gemm", "SGLANG_ENABLE_JIT_DEEPGEMM", "0"): (
                "sglang 0.5.23 raises at start-up when --fp8-gemm-backend deep_gemm meets "
                "SGLANG_ENABLE_JIT_DEEPGEMM=0 (layers/quantization/fp8_utils.py:869-874, 1153-1160)"
            ),
        },
    ),
}


@dataclass(frozen=True)
class Findings:
    errors: list[str]
    warnings: list[str]


def flag_values(argv: Sequence[str]) -> dict[str, str]:
    """``--flag value`` and ``--flag=value`` pairs of an argv; a later one wins, as in argparse."""
    values: dict[str, str] = {}
    for index, token in enumerate(argv):
        if not token.startswith("--"):
            continue
        flag, eq, inline = token.partition("=")
        if eq:
            values[flag] = inline
        elif index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            values[flag] = argv[index + 1]
    return values


def _has_flag(argv: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def check(
    *,
    version: str,
    architecture: str,
    argv: Sequence[str],
    env: dict[str, str],
    patched: bool,
    cuda_graph_max_bs: int | None,
    max_running_requests: int | None,
) -> Findings:
    """Errors and warnings for one variant on the release it pins (pure; argv as rendered)."""
    release = RELEASES.get(version)
    errors: list[str] = []
    warnings: list[str] = []
    if release is None:
        warnings.append(
            f"no release facts recorded for sglang {version}: its defaults are unchecked"
        )
        release = Release(version=version)
    attention = _flag_value(argv, "--attention-backend")
    if (
        architecture in DSA_ARCHITECTURES
        and attention == "flashinfer"
        and release.prefill_graph_breaks_flashinfer_dsa
        and not _has_flag(argv, "--disable-prefill-cuda-graph")
    ):
        errors.append(
            f"--attention-backend flashinfer with {architecture}: "
            f"{release.prefill_graph_breaks_flashinfer_dsa}; set server.extra_args "
            "[--disable-prefill-cuda-graph] or let sglang choose the DSA path"
        )
    if architecture in DSA_ARCHITECTURES:
        _check_dsa(release, argv, errors)
    _check_env(release, argv, env, errors, warnings)
    if cuda_graph_max_bs is not None and max_running_requests is not None and (
        max_running_requests > cuda_graph_max_bs
    ):
        warnings.append(
            f"max_running_requests {max_running_requests} > cuda_graph_max_bs {cuda_graph_max_bs}: "
            f"decode batches of {cuda_graph_max_bs + 1}-{max_running_requests} run without CUDA "
            "graphs (a kernel launch per layer); capture up to the running cap or cap running "
            "requests"
        )
    return Findings(errors=errors, warnings=warnings)


def _check_env(release: Release, argv: Sequence[str], env: dict[str, str],
               errors: list[str], warnings: list[str]) -> None:
    """The release's SM12x environment advice, and flags its environment makes it refuse."""
    for name, (value, why) in sorted(release.sm120_env.items()):
        if env.get(name) != value:
            warnings.append(f"container env {name} is not {value!r}: {why}")
    for (flag, flag_value, name, env_value), why in release.refused_with_env.items():
        if _flag_value(argv, flag) == flag_value and env.get(name) == env_value:
            errors.append(f"{flag} {flag_value} with {name}={env_value}: {why}")


def _check_dsa(release: Release, argv: Sequence[str], errors: list[str]) -> None:
    """The DSA-path facts: backends refused at start-up."""
    # 0.5.23 spells the flags --dsa-*, 0.5.15 takes --nsa-* too; the parser check has run.
    backends = {phase: _flag_value(argv, f"--dsa-{phase}-backend")
                or _flag_value(argv, f"--nsa-{phase}-backend") for phase in ("prefill", "decode")}
    for phase, backend in backends.items():
        if backend in release.cuda_refused_dsa_backends:
            errors.append(
                f"{phase} DSA backend {backend}: {release.cuda_refused_dsa_backends[backend]}"
            )
    fp8 = (_flag_value(argv, "--kv-cache-dtype") or "").startswith("fp8")
    tilelang = [phase for phase, backend in backends.items() if backend == "tilelang"]
    if fp8 and len(tilelang) == 1 and release.tilelang_fp8_needs_both:
        errors.append(
            f"{tilelang[0]} DSA backend tilelang alone: {release.tilelang_fp8_needs_both}"
        )


def computes(architecture: str, argv: Sequence[str], version: str) -> str:
    """One line on what attention a variant computes for the model (shown beside the variant)."""
    if architecture not in DSA_ARCHITECTURES:
        return "the model's own attention"
    attention = _flag_value(argv, "--attention-backend")
    if attention == "flashinfer":
        return ("dense MLA over the whole context (flashinfer gives the DSA indexer no metadata, "
                "so top-k selection is bypassed; equal to sparse only up to index_topk tokens)")
    if attention in (None, "dsa", "nsa"):
        release = RELEASES.get(version)
        default = release.sm120_glm_fp8_dsa_default if release else None
        backends = default or "the release's default DSA backends"
        return f"sparse DSA attention (top-k indexer), {backends} on SM12x with FP8 KV"
    return f"attention backend {attention}"
