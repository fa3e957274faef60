"""`opsctl profile resolve`: what the pinned sglang itself resolves for a variant on the box.

The variant's argv (checked against the pinned parser first) goes through the release's own
`prepare_server_args` + resolution (opsctl.argspec.resolution, offline on CPU, from the real
wheel), with a GLM-5-shaped config.json as the model (the one written from the card of the
profile's checkpoint: `model_config_for`) and the profile's target GPU reported through
torch.cuda. The result is a record: what `/server_info` will say (its settings part;
the scheduler's runtime figures need the GPUs and are listed under `not_run`), every setting
the profile left to sglang that sglang changed, the KV row width from the release's own pool
sizing, or the release's refusal with its file:line.

Records live in the release's folder (opsctl.core.paths.release_dir), at
`patches/sglang/<version>/resolved/<profile>.<variant>.json`, one per variant, regenerated
together by `opsctl profile resolve --write-records` and compared in CI.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl.argspec import resolution, stack
from opsctl.argspec.resolution import GpuReport as GpuReport
from opsctl.argspec.resolution import Probed
from opsctl.config.profiles import Deployment, check_argv, to_argv
from opsctl.core.errors import ProfileError, UsageError
from opsctl.core.files import atomic_write_text, read_bounded, sha256_file
from opsctl.core.paths import project_root, release_dir, releases_root

RECORD_FORMAT = 1
RECORD_DIR = "resolved"
FIXTURE = Path("tests/fixtures/glm5/config.json")
CONFIG_MAX_BYTES = 1 << 20
# GPUs opsctl can report to sglang: (compute capability, GiB per GPU). The profile's target is
# the RTX PRO 6000 Blackwell of deploy/glm5-nvfp4-rtx6000.yaml's header (sm_120, 96 GB).
KNOWN_GPUS: dict[str, tuple[tuple[int, int], float]] = {
    "RTX PRO 6000 Blackwell": ((12, 0), 96.0),
}
TARGET_GPU = "RTX PRO 6000 Blackwell"
# torch.version.cuda as reported: the cu130 lane of the pinned base images (image.base tags).
CUDA_VERSION = "13.0"
GLM_ARCHITECTURE = "GlmMoeDsaForCausalLM"
GLM_MODEL_TYPE = "glm_moe_dsa"
GLM_GEOMETRY = ("num_hidden_layers", "num_attention_heads", "kv_lora_rank", "qk_rope_head_dim",
                "qk_nope_head_dim", "v_head_dim", "index_topk")
# What /server_info will say, by meaning: (label, path into the resolved record per spelling).
SUMMARY: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("attention backend", (("attention_backend",),)),
    ("prefill attention backend", (("prefill_attention_backend",),)),
    ("decode attention backend", (("decode_attention_backend",),)),
    ("DSA prefill backend", (("dsa_prefill_backend",), ("nsa_prefill_backend",))),
    ("DSA decode backend", (("dsa_decode_backend",), ("nsa_decode_backend",))),
    ("KV cache dtype", (("kv_cache_dtype",),)),
    ("page size", (("page_size",),)),
    ("decode CUDA-graph max batch", (("cuda_graph_config", "decode", "max_bs"),
                                     ("cuda_graph_max_bs",))),
    ("decode CUDA-graph batch sizes", (("cuda_graph_config", "decode", "bs"),
                                       ("cuda_graph_bs",))),
    ("prefill CUDA graph disabled", (("disable_prefill_cuda_graph",),)),
    ("prefill CUDA-graph backend", (("cuda_graph_config", "prefill", "backend"),)),
    ("prefill CUDA-graph max tokens", (("cuda_graph_config", "prefill", "max_bs"),)),
    ("CUDA graphs disabled", (("disable_cuda_graph",),)),
    ("MoE runner backend", (("moe_runner_backend",),)),
    ("max running requests", (("max_running_requests",),)),
    ("speculative algorithm", (("speculative_algorithm",),)),
    ("speculative steps", (("speculative_num_steps",),)),
    ("speculative EAGLE top-k", (("speculative_eagle_topk",),)),
    ("speculative draft tokens", (("speculative_num_draft_tokens",),)),
    ("speculative draft model", (("speculative_draft_model_path",),)),
)
# Parts of /server_info and of the launch that need the GPUs: never guessed, always listed.
NOT_RUN = (
    ("/server_info scheduler fields (max_total_num_tokens, max_req_input_len, ...)",
     "the scheduler sizes the KV pool from free GPU memory after loading the weights"),
    ("CUDA-graph capture", "the batch sizes above are resolved; capturing them runs kernels"),
    ("model weights and quant_config", "no checkpoint is loaded: kv_cache_dtype 'auto' would "
     "read the loaded model's kv_cache_quant_algo"),
)


@dataclass(frozen=True)
class Resolved:
    """One variant's record (the JSON written to `path`)."""

    record: dict[str, Any]
    path: Path


Runner = Callable[[str, list[list[str]], GpuReport], Probed]


def gpu_report(deployment: Deployment, name: str | None = None, count: int | None = None,
               memory_gb: float | None = None, capability: str | None = None) -> GpuReport:
    """The GPU reported to sglang: the profile's target unless an option changes a part."""
    chosen = name or TARGET_GPU
    if chosen not in KNOWN_GPUS:
        raise UsageError(f"unknown GPU {chosen!r}",
                         hint=f"known: {', '.join(KNOWN_GPUS)}; set --compute-capability and "
                              "--gpu-memory-gb for another card")
    known_cc, known_memory = KNOWN_GPUS[chosen]
    cc = known_cc if capability is None else _capability(capability)
    gpus = len(deployment.profile.container.gpus) or deployment.server.tp_size
    return GpuReport(name=chosen, count=count or gpus,
                     memory_gb=known_memory if memory_gb is None else memory_gb,
                     capability=cc, cuda=CUDA_VERSION)


def _capability(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d{1,2})\.(\d)", text.strip())
    if not match:
        raise UsageError(f"--compute-capability {text!r} is not MAJOR.MINOR", hint="e.g. 12.0")
    return int(match[1]), int(match[2])


def check_model_config(path: Path) -> dict[str, Any]:
    """A GLM-5-shaped config.json (GlmMoeDsaForCausalLM geometry), else UsageError."""
    try:
        data = read_bounded(path, "--model-config", CONFIG_MAX_BYTES)
        config = json.loads(data.decode())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not JSON"
        raise UsageError(f"cannot read {path}: {reason}", hint="pass a model's config.json"
                         ) from None
    problems = []
    if not isinstance(config, dict):
        config, problems = {}, ["not a JSON object"]
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or GLM_ARCHITECTURE not in architectures:
        problems.append(f"architectures lacks {GLM_ARCHITECTURE}")
    if config.get("model_type") != GLM_MODEL_TYPE:
        problems.append(f"model_type is not {GLM_MODEL_TYPE}")
    missing = [k for k in GLM_GEOMETRY if not _positive_int(config.get(k))]
    if missing:
        problems.append(f"no integer from 1 to {GEOMETRY_MAX}: " + ", ".join(missing))
    if problems:
        raise UsageError(f"{path} is not a GLM-5-shaped config.json: {'; '.join(problems)}",
                         hint=f"use {FIXTURE} or the checkpoint's own config.json")
    return config


# A sanity bound on each geometry number (GLM-5: 78 layers, 64 heads, kv_lora_rank 512, index_topk
# 2048), not a model fact: sglang's resolution is linear in the layers (10^6 took 25 s).
GEOMETRY_MAX = 1 << 16


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= GEOMETRY_MAX


def record_path(deployment: Deployment) -> Path:
    return (release_dir(deployment.image.sglang_version) / RECORD_DIR
            / f"{deployment.profile.name}.{deployment.variant}.json")


def resolve(deployments: Iterable[Deployment], gpu: Callable[[Deployment], GpuReport],
            model_config: Path | None = None, runner: Runner | None = None,
            on_note: resolution.Note = lambda line: None) -> list[Resolved]:
    """Each deployment's record, in order: one probe per (release, GPU). What the probe needs
    and is not cached (wheel, side environment, CPU torch) is announced by `on_note`, then
    downloaded."""
    run = runner or (lambda version, argvs, report: resolution.resolve_argvs(
        version, argvs, report, on_note=on_note))
    items = [(d, check_argv(d)[len(d.server.entrypoint):], gpu(d),
              model_config or model_config_for(d)) for d in deployments]
    for config_path in {item[3] for item in items}:
        check_model_config(config_path)
    results: dict[int, Resolved] = {}
    with tempfile.TemporaryDirectory(prefix="opsctl-model-") as tmp:
        groups: dict[tuple[str, GpuReport, Path], list[int]] = {}
        for index, (deployment, _, report, config_path) in enumerate(items):
            key = (deployment.image.sglang_version, report, config_path)
            groups.setdefault(key, []).append(index)
        for number, ((version, report, config_path), indexes) in enumerate(groups.items()):
            model_dir = Path(tmp) / f"model{number}"
            model_dir.mkdir()
            shutil.copyfile(config_path, model_dir / "config.json")
            argvs = [_with_model(items[i][1], str(model_dir)) for i in indexes]
            probed = run(version, argvs, report)
            for i, result in zip(indexes, probed.dump["results"], strict=True):
                deployment, argv = items[i][0], items[i][1]
                clean = _replace_text(result, str(model_dir),
                                      deployment.model.container_path)
                record = build_record(deployment, argv, report, config_path, probed, clean)
                results[i] = Resolved(record=record, path=record_path(deployment))
    return [results[i] for i in range(len(items))]


def model_config_for(deployment: Deployment) -> Path:
    """The config.json a profile resolves with: the one written from its checkpoint's card
    (argspec.stack.MODEL_CONFIGS, by model.repo), else GLM-5's."""
    folder = stack.MODEL_CONFIGS.get(deployment.profile.model.repo or "")
    return project_root() / (folder / "config.json" if folder else FIXTURE)


def _with_model(argv: list[str], model_dir: str) -> list[str]:
    """The argv with the model path pointing at the config (first, as the probe expects)."""
    rest = list(argv)
    if "--model-path" in rest:
        at = rest.index("--model-path")
        del rest[at:at + 2]
    return ["--model-path", model_dir, *rest]


def _replace_text(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace_text(item, old, new) for item in value]
    if isinstance(value, dict):
        return {key: _replace_text(item, old, new) for key, item in value.items()}
    return value


def summary(resolved: dict[str, Any]) -> dict[str, Any]:
    """The SUMMARY settings from a resolved record (None where the release has no such key)."""
    return {label: _first(resolved, paths) for label, paths in SUMMARY}


def _first(resolved: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> Any:
    for path in paths:
        value: Any = resolved
        for key in path:
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            return value
    return None


def left_to_sglang(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Fields the argv did not set whose resolved value differs from the parser's default."""
    defaults, resolved = result["defaults"], result["resolved"]
    given = set(result.get("set_by_argv", ()))
    return {name: {"default": defaults.get(name), "resolved": value}
            for name, value in sorted(resolved.items())
            if name not in given and name in defaults and defaults[name] != value}


def build_record(deployment: Deployment, argv: list[str], gpu: GpuReport, config_path: Path,
                 probed: Probed, result: dict[str, Any]) -> dict[str, Any]:
    version = deployment.image.sglang_version
    dump = probed.dump
    record: dict[str, Any] = {
        "format": RECORD_FORMAT, "profile": deployment.profile.name,
        "variant": deployment.variant, "sglang_version": version,
        "regenerate": "opsctl profile resolve --write-records",
        "argv": argv,
        "gpu": {"name": gpu.name, "count": gpu.count, "memory_gib": gpu.memory_gb,
                "compute_capability": f"{gpu.capability[0]}.{gpu.capability[1]}",
                "cuda": gpu.cuda},
        "model_config": {"path": _shown(config_path), "sha256": sha256_file(config_path)},
        "faked": faked(gpu, result.get("gpu_calls", {})),
        "provenance": {
            "wheel": probed.wheel, "wheel_sha256": probed.wheel_sha256,
            "transformers": dump["transformers_version"],
            "transformers_pinned": probed.pins.get("transformers"),
            "torch": dump["torch_version"], "torch_pinned": probed.pins.get("torch"),
            "torch_choice": resolution.TORCH_CHOICE,
            "placeholder_modules": dump["placeholder_modules"],
            # Varies with the machine's package mirror; not compared by the drift test.
            "run": {"side_packages": probed.side_packages},
        },
        "outcome": outcome(result),
    }
    if "unresolved" in result:
        failed = result["unresolved"]
        record["unresolved"] = failed
        record["not_run"] = [{
            "branch": f"{failed['step']} ({failed['where'] or 'sglang'})",
            "why": f"{failed['error']}: import-time code of this release asks the GPU stack "
                   "(a placeholder here) and cannot run without a GPU"}]
    elif "refused" in result:
        record["refused"] = result["refused"]
        record["not_run"] = [{"branch": "everything after the refusal",
                              "why": "the release refused this argv (above)"}]
    else:
        record["server_info"] = summary(result["resolved"])
        record["kv_row"] = result["kv_row"]
        if "dsa_topk_shared" in result:  # only a model whose layers share top-k (GLM-5.2)
            record["dsa_topk_shared"] = result["dsa_topk_shared"]
        record["left_to_sglang"] = left_to_sglang(result)
        record["not_run"] = [{"branch": b, "why": w} for b, w in NOT_RUN]
        if not result["kv_row"].get("computed"):
            record["not_run"].append({"branch": "KV row width", "why": result["kv_row"]["error"]})
    record["sglang_log"] = result.get("log", [])
    if "resolved" in result:
        record["resolved"] = result["resolved"]
    return record


def outcome(result: dict[str, Any]) -> str:
    """resolved; refused (the release rejected the argv); unresolved (it could not run here)."""
    for name in ("unresolved", "refused"):
        if name in result:
            return name
    return "resolved"


def faked(gpu: GpuReport, calls: dict[str, int]) -> list[str]:
    lines = [f"{name} (called {count}x)" for name, count in sorted(calls.items())]
    return [
        f"torch.cuda reports {gpu.count}x {gpu.name}: sm_{gpu.capability[0]}{gpu.capability[1]},"
        f" {gpu.memory_gb:g} GiB each; torch.version.cuda = {gpu.cuda}",
        *lines,
        "pynvml and nvidia-smi absent (sglang falls back to torch.cuda)",
        "GPU-only packages (provenance.placeholder_modules) are inert placeholders seen by "
        "sglang's modules only",
    ]


def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(project_root()).as_posix()
    except ValueError:
        return str(path)


def write(resolved: list[Resolved], stale_from: Iterable[str] = ()) -> list[Path]:
    """Write each record atomically; remove records of these profiles' vanished variants."""
    written = []
    for item in resolved:
        atomic_write_text(item.path, json.dumps(item.record, indent=1, sort_keys=False) + "\n")
        written.append(item.path)
    keep = {item.path for item in resolved}
    for profile in stale_from:
        for old in releases_root().glob(f"*/{RECORD_DIR}/{profile}.*.json"):
            if old not in keep:
                old.unlink()
    return written


def current_record(deployment: Deployment) -> tuple[dict[str, Any], str] | None:
    """(record, its path as shown) when the deployment's record is resolved and of its current
    argv; None when there is none (a profile outside deploy/) or it is stale or refused."""
    path = record_path(deployment)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    argv = to_argv(deployment)[len(deployment.server.entrypoint):]
    if not isinstance(record, dict) or record.get("outcome") != "resolved" or (
            record.get("argv") != argv
            or record.get("sglang_version") != deployment.image.sglang_version):
        return None
    return record, _shown(path)


def record_profiles() -> list[str]:
    """The profiles whose records are kept: every deploy/*.yaml."""
    return sorted(path.stem for path in (project_root() / "deploy").glob("*.yaml"))


def raise_on_refusal(resolved: list[Resolved]) -> None:
    """A variant its release refuses cannot start: exit 2 (after the record was printed)."""
    for item in resolved:
        record = item.record
        if record["outcome"] == "refused":
            raise ProfileError(
                f"sglang {record['sglang_version']} refuses variant {record['variant']!r} of "
                f"{record['profile']!r}: {record['refused']['error']}",
                hint=f"at {record['refused']['where'] or 'sglang'}; change the variant's flags")
