"""The sections of a deployment profile (image, model, server, container, readiness, SLO, a
variant), as strict pydantic models; `opsctl.config.profiles` puts them together.

Values are checked beyond their types by opsctl.config.profile_checks (names, addresses, sizes,
secrets), so a value Docker or sglang would refuse after opsctl touched something is refused
when the profile loads.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from opsctl.config.profile_checks import (
    MAX_POLL_SECONDS,
    MAX_READINESS_SECONDS,
    MAX_STOP_GRACE_SECONDS,
    check_address,
    check_env_name,
    check_size,
    env_names,
    no_literal_secrets,
    size_bytes,
)
from opsctl.core.imageref import reference_problem, repository_problem

# The runtime switch the gather-then-cast patch reads: "1" takes the patched path, anything
# else the stock one, so one image serves both `baseline` and `gathercast`. Rendered from the
# variant's `requires_patch`, never written by hand; equal to the kernel's SWITCH_ENV and the
# patch sets' `switch_env` (a unit test holds the three together).
PATCH_SWITCH_ENV = "OPSCTL_KV_GATHER_CAST"
# Rendered from `container.nccl_p2p_level` (typed, so a bad level is refused at load time).
NCCL_P2P_LEVEL_ENV = "NCCL_P2P_LEVEL"
# NCCL's accepted path types, nearest to farthest (NCCL docs, "Environment Variables").
NcclP2pLevel = Literal["LOC", "NVL", "PIX", "PXB", "PHB", "SYS"]
_RENDERED_ENV = {
    PATCH_SWITCH_ENV: "the variant's requires_patch",
    NCCL_P2P_LEVEL_ENV: "container.nccl_p2p_level",
}


def _no_rendered_env(env: dict[str, str]) -> dict[str, str]:
    for name, source in _RENDERED_ENV.items():
        if name in env:
            raise ValueError(f"{name} is rendered from {source}; do not set it by hand")
    return no_literal_secrets(env)


def _env_name(value: str | None) -> str | None:
    return None if value is None else check_env_name(value)


def _repository(value: str) -> str:
    problem = repository_problem(value)
    if problem:
        raise ValueError(f"{value[:80]!r}: {problem}")
    return value


def _tagged(value: str) -> str:
    problem = reference_problem(value)
    if problem:
        raise ValueError(f"base image {value[:80]!r}: {problem}")
    name = value.split("@", 1)[0]
    if ":" not in name.rsplit("/", 1)[-1]:
        raise ValueError(f"base image {value!r} needs an explicit tag; 'latest' is never implied")
    return value


class StrictModel(BaseModel):
    # allow_inf_nan off: `.inf` and `.nan` validated every `gt=0` and crashed later.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ImageSpec(StrictModel):
    kind: Literal["sglang", "simulator"] = "sglang"
    repository: str = Field(
        description="Name of the image opsctl builds (the tag is a content hash)."
    )
    base: str = Field(description="Base image, pinned by tag; its digest is locked at first build.")
    sglang_version: str = Field(
        description="Pinned sglang release: flags, patch set and checks follow it."
    )
    dockerfile: str = "docker/Dockerfile"
    build_args: dict[str, str] = Field(default_factory=dict)
    install_release: bool = Field(
        False, description="Install the pinned release into the base at build time: its wheel "
        "and every == pin of its METADATA (patches/sglang/<version>/stack.json names the wheel), "
        "staged from the host's wheel cache, for a base that holds another release "
        "(docs/build.md).")

    _base_has_tag = field_validator("base")(_tagged)
    _repository_is_one = field_validator("repository")(_repository)


class ImageOverlay(StrictModel):
    """What a variant may change of the profile's image: the release and its base image.

    The repository stays the profile's: a tag carries the release and a content hash, so the
    images of two releases never collide.
    """

    sglang_version: str | None = Field(None, description="The sglang release this variant runs.")
    base: str | None = Field(None, description="Base image of that release, pinned by tag.")
    install_release: bool | None = Field(
        None,
        description="Install the release into that base at build time (image.install_release).",
    )

    @field_validator("base")
    @classmethod
    def _base_has_tag(cls, value: str | None) -> str | None:
        return None if value is None else _tagged(value)


# A Hugging Face repository id: `owner/name`, the hub's own characters (huggingface_hub's
# validate_repo_id: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters).
_REPO_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_REVISION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,254}")


def _repo_id(value: str | None) -> str | None:
    if value is not None and (not _REPO_ID_RE.fullmatch(value) or "--" in value
                              or ".." in value):
        raise ValueError("must be a Hugging Face repository id, owner/name (e.g. "
                         "nvidia/GLM-5-NVFP4)")
    return value


def _revision(value: str | None) -> str | None:
    if value is not None and (not _REVISION_RE.fullmatch(value) or ".." in value):
        raise ValueError("must be a branch, tag or commit of the repository (e.g. main)")
    return value


def _absolute(value: str | None) -> str | None:
    # Docker bind-mounts absolute paths only; a relative one was refused at launch (exit 4).
    if value is not None and not value.startswith("/"):
        raise ValueError("must be an absolute path (Docker mounts only those)")
    return value


# Speculative algorithms whose draft is the checkpoint's own NextN (MTP) layer when no other
# draft model is given (sglang's NEXTN is EAGLE on that layer).
NEXTN_ALGORITHMS = frozenset({"EAGLE", "NEXTN"})
DRAFT_MODEL_FLAG = "--speculative-draft-model-path"
DEFAULT_REVISION = "main"  # a checkpoint's revision when none is named for its repo


class MtpCheckpoint(StrictModel):
    """The checkpoint every MTP variant serves (community builds ship the NextN layer apart)."""

    repo: str | None = Field(None, description="Its Hugging Face repository.")
    revision: str | None = Field(None, description="Its branch, tag or commit (main when not "
                                 "given: model.revision names the profile's repo's).")
    host_path: str = Field(description="Where it lies on the host (mounted where the server "
                           "reads weights, so the argv stays the same).")

    _path = field_validator("host_path")(_absolute)
    _repo = field_validator("repo")(_repo_id)
    _rev = field_validator("revision")(_revision)


class ModelSpec(StrictModel):
    host_path: str | None = Field(None, description="Weights on the host, mounted read-only; "
                                  "`opsctl model fetch` downloads `repo` here.")
    container_path: str = Field(description="Where the server sees the weights (--model-path).")
    served_name: str = Field(description="Name clients send as `model` (--served-model-name).")
    architecture: str | None = Field(
        None, description="HF architecture, e.g. GlmMoeDsaForCausalLM."
    )
    repo: str | None = Field(None, description="Hugging Face repository `opsctl model fetch` "
                             "downloads into host_path (only the files serving reads).")
    revision: str = Field(
        DEFAULT_REVISION,
        description="Branch, tag or commit of `repo`; the commit it "
        "resolved to is printed by `model fetch`.",
    )
    token_env: str = Field("HF_TOKEN", description="Environment variable holding the hub token "
                           "for a gated or private `repo` (the name only; never its value).")
    mtp: MtpCheckpoint | None = Field(None, description="The checkpoint with the NextN layer "
                                      "that every variant drafting on it (EAGLE/NEXTN without a "
                                      "draft model) serves instead; null: this one.")

    _paths = field_validator("host_path", "container_path")(_absolute)
    _repo = field_validator("repo")(_repo_id)
    _rev = field_validator("revision")(_revision)
    _token = field_validator("token_env")(check_env_name)

    @field_validator("served_name")
    @classmethod
    def _no_colon(cls, value: str) -> str:
        # sglang rejects ':' in --served-model-name (validation_hook.py in 0.5.23).
        if ":" in value or not value.strip():
            raise ValueError("served_name must be non-empty and must not contain ':'")
        return value


class ServerSettings(StrictModel):
    """Typed sglang settings: each field owns exactly one flag, rendered by `to_argv`."""

    entrypoint: list[str] = Field(default_factory=lambda: ["python3", "-m", "sglang.launch_server"])
    host: str = "0.0.0.0"
    port: int = Field(30000, ge=1, le=65535)
    tp_size: int = Field(1, ge=1)
    nnodes: int = Field(
        1, ge=1, description="Hosts one server spans (--nnodes, rendered only above 1). `up` runs "
        "one host; a profile above 1 is for `opsctl render k8s`, which adds each pod's "
        "--dist-init-addr and --node-rank.")
    trust_remote_code: bool = False
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    attention_backend: str | None = None
    # The sparse-attention (DSA) backends of GLM-5/DeepSeek-V3.2-style models. They also decide the
    # KV pool's row layout (patches/sglang/<v>/manifest.json says how), so they matter even when
    # attention itself runs on flashinfer MLA.
    dsa_prefill_backend: str | None = None
    dsa_decode_backend: str | None = None
    moe_runner_backend: str | None = None
    disable_shared_experts_fusion: bool = False
    mem_fraction_static: float | None = Field(None, gt=0.0, lt=1.0)
    chunked_prefill_size: int | None = None
    # 0.5.23's breakable prefill CUDA graph crashes flashinfer MLA on a DSA model (releases.py).
    disable_prefill_cuda_graph: bool = False
    # Speculative decoding (MTP: EAGLE on the checkpoint's NextN layer). Each owns its one flag.
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = Field(None, ge=1)
    speculative_eagle_topk: int | None = Field(None, ge=1)
    speculative_num_draft_tokens: int | None = Field(None, ge=1)
    cuda_graph_max_bs: int | None = Field(None, ge=1)
    max_running_requests: int | None = Field(None, ge=1)
    context_length: int | None = Field(None, ge=1)
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    enable_metrics: bool = True
    watchdog_timeout: int | None = Field(None, ge=1)
    api_key_env: str | None = Field(
        None, description="Host environment variable whose value `up` passes as --api-key (the "
        "profile, labels, `profile show` and --dry-run show only $NAME; `docker inspect` shows "
        "the value, as sglang reads the key from its argv only). OPSCTL_API_KEY is the one "
        "opsctl's own probes and clients send.")
    admin_api_key_env: str | None = Field(
        None, description="Likewise for --admin-api-key.")
    extra_args: list[str] = Field(default_factory=list, description="Escape hatch, appended "
                                  "verbatim; may not repeat a typed field's flag or pass a secret.")

    _env_names = field_validator("api_key_env", "admin_api_key_env")(_env_name)


# `render k8s`'s resource requests when the profile states none (ContainerSettings.pod_*).
CPU_PER_GPU = 1
CPU_BESIDE_GPUS = 4
MEMORY_PER_GPU_GIB = 16


class ContainerSettings(StrictModel):
    gpus: list[int] = Field(default_factory=list, description="Exact GPU indices; empty = no GPU.")
    ipc_host: bool = True
    shm_size: str | None = Field(None, description="Docker size, e.g. 32g (with ipc_host: false).")
    memlock_unlimited: bool = True
    stack_bytes: int | None = 67_108_864
    cache_volume: str | None = Field(
        "opsctl-jit-cache", description="Named volume for JIT caches, one per image: the name "
        "gets the image reference's key appended (opsctl-jit-cache-<12 hex>).")
    cache_mount: str = "/root/.cache"
    publish_address: str = Field("127.0.0.1", description="IP address the port is published on.")
    host_port: int = Field(30000, ge=1, le=65535)
    stop_grace_seconds: int = Field(60, ge=1, le=MAX_STOP_GRACE_SECONDS)
    restart_max: int = Field(
        3, ge=0, le=100, description="Docker restart policy on-failure:N: the engine restarts a "
        "crashed server at most this often, so a crash loop stops and `status` shows it; 0: "
        "never restart.")
    health_interval_seconds: int = Field(
        30, ge=1, le=3600, description="Docker HEALTHCHECK of sglang's /health (no generation): "
        "every this many seconds; its start period is readiness.timeout_seconds.")
    health_timeout_seconds: int = Field(10, ge=1, le=600)
    health_retries: int = Field(3, ge=1, le=100, description="Failed checks in a row that make "
                                "the server unhealthy.")
    log_max_size: str = Field("100m", description="json-file log rotation: the size of one file "
                              "(Docker size, e.g. 100m).")
    log_max_files: int = Field(5, ge=1, le=100, description="json-file log rotation: files kept.")
    nccl_p2p_level: NcclP2pLevel | None = Field(
        None, description=f"Rendered as {NCCL_P2P_LEVEL_ENV}; null lets NCCL decide. Set SYS only "
        "where `opsctl host p2p` reports P2P across the root complex OK.")
    cpu_request: float | None = Field(
        None, gt=0, le=1024, description="`render k8s`: the serving container's CPU request "
        f"in cores; null: {CPU_PER_GPU} per GPU (each tensor-parallel rank's scheduler keeps a "
        f"core busy) plus {CPU_BESIDE_GPUS} (tokenizer, detokenizer, HTTP server, loaders), 1 "
        "without GPUs. No CPU limit is rendered: a CFS quota would throttle those busy loops.")
    memory_request: str | None = Field(
        None, description="`render k8s`: the serving container's memory request (Docker size, "
        f"e.g. 128g); null: {MEMORY_PER_GPU_GIB}g per GPU, 1g without GPUs (an estimate of "
        "each rank's host memory, not measured on GLM-5: set it from `docker stats` of `up`'s "
        "server at peak). Any request gives the pod Burstable QoS, evicted after BestEffort "
        "pods under node memory pressure.")
    memory_limit: str | None = Field(
        None, description="`render k8s`: the memory limit (Docker size); null: none, since "
        "the weights' page cache and the memory-backed /dev/shm count against it and an OOM "
        "kill reloads every weight. Set with cpu_request and memory_request equal to it for "
        "Guaranteed QoS.")
    env: dict[str, str] = Field(default_factory=dict)
    env_from_host: list[str] = Field(
        default_factory=list, description="Variables copied from the host's environment at "
        "launch (secrets such as HF_TOKEN): named in the profile, never valued.")

    _env_is_not_rendered = field_validator("env")(_no_rendered_env)
    _address = field_validator("publish_address")(check_address)
    _size = field_validator("shm_size", "log_max_size", "memory_request",
                            "memory_limit")(check_size)
    _host_names = field_validator("env_from_host")(env_names)

    @field_validator("log_max_size")
    @classmethod
    def _rotates(cls, value: str) -> str:
        # Docker's json-file driver refuses max-size 0 when the container is created.
        if int(value.rstrip("bkmgBKMG")) == 0:
            raise ValueError("log_max_size must be above 0")
        return value

    @model_validator(mode="after")
    def _request_within_limit(self) -> ContainerSettings:
        if self.memory_request and self.memory_limit and (
                size_bytes(self.memory_request) > size_bytes(self.memory_limit)):
            raise ValueError(f"memory_request {self.memory_request} is above memory_limit "
                             f"{self.memory_limit}")
        return self

    def pod_cpu(self) -> float:
        """The CPU request `render k8s` writes, in cores."""
        if self.cpu_request is not None:
            return self.cpu_request
        return CPU_PER_GPU * len(self.gpus) + CPU_BESIDE_GPUS if self.gpus else 1

    def pod_memory(self) -> str:
        """The memory request `render k8s` writes (a Docker size): the stated one, else the
        per-GPU estimate, never above memory_limit."""
        if self.memory_request:
            return self.memory_request
        derived = f"{MEMORY_PER_GPU_GIB * len(self.gpus)}g" if self.gpus else "1g"
        if self.memory_limit and size_bytes(self.memory_limit) < size_bytes(derived):
            return self.memory_limit
        return derived

    @model_validator(mode="after")
    def _host_env_is_not_set_here(self) -> ContainerSettings:
        both = sorted(set(self.env_from_host) & {*self.env, *_RENDERED_ENV})
        if both:
            raise ValueError(f"{', '.join(both)}: in env_from_host and set (or rendered) here too")
        return self


class Readiness(StrictModel):
    timeout_seconds: float = Field(3600, gt=0, le=MAX_READINESS_SECONDS)
    poll_interval_seconds: float = Field(2.0, gt=0, le=MAX_POLL_SECONDS)

    @model_validator(mode="after")
    def _poll_within_timeout(self) -> Readiness:
        if self.poll_interval_seconds > self.timeout_seconds:
            raise ValueError(f"poll_interval_seconds ({self.poll_interval_seconds:g}) is longer "
                             f"than timeout_seconds ({self.timeout_seconds:g})")
        return self


class ModelOverlay(StrictModel):
    """What a variant may change of the profile's model: which checkpoint it serves. An MTP
    variant needs one that holds the NextN layer (community builds ship it apart)."""

    repo: str | None = Field(None, description="Another Hugging Face repository.")
    revision: str | None = Field(None, description="Its branch, tag or commit (main for "
                                 "another repo when not given).")
    host_path: str | None = Field(None, description="Where that checkpoint lies on the host.")
    container_path: str | None = Field(None, description="Where the server sees it.")

    _paths = field_validator("host_path", "container_path")(_absolute)
    _repo = field_validator("repo")(_repo_id)
    _rev = field_validator("revision")(_revision)

    @model_validator(mode="after")
    def _own_folder(self) -> ModelOverlay:
        if self.repo is not None and self.host_path is None:
            raise ValueError("a variant with its own `repo` needs its own `host_path` (two "
                             "checkpoints in one folder would mix their shards)")
        return self


class Variant(StrictModel):
    description: str = ""
    requires_patch: bool = Field(False, description="Runs the gather-then-cast patch: renders "
                                 f"{PATCH_SWITCH_ENV}=1 (else 0) into the container env.")
    image: ImageOverlay = Field(
        default_factory=ImageOverlay,
        description="Overlay on `image`: another sglang release and its base.",
    )
    model: ModelOverlay = Field(default_factory=ModelOverlay,
                                description="Overlay on `model`: another checkpoint.")
    server: dict[str, Any] = Field(default_factory=dict, description="Overlay on `server`.")
    env: dict[str, str] = Field(default_factory=dict, description="Overlay on `container.env`.")
    expect: dict[str, str | int | None] = Field(
        default_factory=dict, description="What the server must resolve for settings no flag sets "
        "(e.g. a hardware-dependent default); checked by `opsctl verify` and `up`.")

    _env_is_not_rendered = field_validator("env")(_no_rendered_env)
