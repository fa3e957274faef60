"""Deployment profiles: strict pydantic models of `deploy/<name>.yaml`, variants resolved.

One `Profile` is loaded and validated once per command; a variant is an overlay of server
settings and environment on it (never a copy), and `Profile.resolve(variant)` returns the
`Deployment` every command works from. The sglang argv is rendered at the last moment by
`to_argv`, checked against the pinned sglang's own argument parser.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from opsctl.argspec import spec as sglang_args
from opsctl.core.errors import ProfileError, UsageError
from opsctl.core.paths import project_root
from opsctl.image import patchset

DEFAULT_PROFILE_ENV = "OPSCTL_PROFILE"
DEFAULT_PROFILE = "sim"
# The runtime switch the gather-then-cast patch reads: "1" takes the patched path, anything
# else the stock one, so one image serves both `baseline` and `gathercast`.
PATCH_SWITCH_ENV = "OPSCTL_KV_GATHER_CAST"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageSpec(StrictModel):
    kind: Literal["sglang", "simulator"] = "sglang"
    repository: str = Field(description="Name of the image opsctl builds (the tag is a content hash).")
    base: str = Field(description="Base image, pinned by tag; its digest is locked at first build.")
    sglang_version: str = Field(description="Pinned sglang release: flags, patch set and checks follow it.")
    dockerfile: str = "dockerfiles/Dockerfile"
    build_args: dict[str, str] = Field(default_factory=dict)

    @field_validator("base")
    @classmethod
    def _base_has_tag(cls, value: str) -> str:
        name = value.split("@", 1)[0]
        if ":" not in name.rsplit("/", 1)[-1]:
            raise ValueError(f"base image {value!r} needs an explicit tag; 'latest' is never implied")
        return value


class ModelSpec(StrictModel):
    host_path: str | None = Field(None, description="Weights on the host, mounted read-only.")
    container_path: str = Field(description="Where the server sees the weights (--model-path).")
    served_name: str = Field(description="Name clients send as `model` (--served-model-name).")
    architecture: str | None = Field(None, description="HF architecture, e.g. GlmMoeDsaForCausalLM.")

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
    cuda_graph_max_bs: int | None = Field(None, ge=1)
    max_running_requests: int | None = Field(None, ge=1)
    context_length: int | None = Field(None, ge=1)
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    enable_metrics: bool = True
    watchdog_timeout: int | None = Field(None, ge=1)
    extra_args: list[str] = Field(default_factory=list, description="Escape hatch, appended verbatim.")


class ContainerSettings(StrictModel):
    gpus: list[int] = Field(default_factory=list, description="Exact GPU indices; empty = no GPU.")
    ipc_host: bool = True
    shm_size: str | None = None
    memlock_unlimited: bool = True
    stack_bytes: int | None = 67_108_864
    cache_volume: str | None = Field("opsctl-jit-cache", description="Named volume for JIT caches.")
    cache_mount: str = "/root/.cache"
    publish_address: str = "127.0.0.1"
    host_port: int = Field(30000, ge=1, le=65535)
    stop_grace_seconds: int = Field(60, ge=1)
    env: dict[str, str] = Field(default_factory=dict)


class Readiness(StrictModel):
    timeout_seconds: float = Field(3600, gt=0)
    poll_interval_seconds: float = Field(2.0, gt=0)


class Slo(StrictModel):
    tpot_p50_ms: float | None = Field(None, gt=0)
    ttft_p50_ms: float | None = Field(None, gt=0)


class Variant(StrictModel):
    description: str = ""
    requires_patch: bool = Field(False, description="Needs the gather-then-cast patch in the image.")
    server: dict[str, Any] = Field(default_factory=dict, description="Overlay on `server`.")
    env: dict[str, str] = Field(default_factory=dict, description="Overlay on `container.env`.")


class Profile(StrictModel):
    name: str
    description: str = ""
    image: ImageSpec
    model: ModelSpec
    server: ServerSettings
    # Frozen models: one shared default instance is safe.
    container: ContainerSettings = ContainerSettings()
    readiness: Readiness = Readiness()
    slo: Slo = Slo()
    variants: dict[str, Variant]
    default_variant: str

    @model_validator(mode="after")
    def _default_variant_exists(self) -> Profile:
        if self.default_variant not in self.variants:
            raise ValueError(f"default_variant {self.default_variant!r} is not among the variants")
        return self

    def variant_server(self, variant: str) -> ServerSettings:
        overlay = self.variants[variant].server
        return ServerSettings.model_validate({**self.server.model_dump(), **overlay})

    def resolve(self, variant: str | None = None) -> Deployment:
        chosen = variant or self.default_variant
        if chosen not in self.variants:
            raise UsageError(
                f"profile {self.name!r} has no variant {chosen!r}",
                hint=f"valid variants: {', '.join(sorted(self.variants))}",
            )
        spec = self.variants[chosen]
        env = {**self.container.env, **spec.env}
        return Deployment(
            profile=self,
            variant=chosen,
            server=self.variant_server(chosen),
            env=env,
            patched=spec.requires_patch,
        )


class Deployment(StrictModel):
    """A profile with one variant applied: what `up`, `smoke` and `bench` act on."""

    profile: Profile
    variant: str
    server: ServerSettings
    env: dict[str, str]
    patched: bool

    def config_hash(self) -> str:
        """sha256 of everything that shapes the running server: the `up` idempotence key."""
        shaping = {
            "argv": to_argv(self),
            "env": self.env,
            "image": self.profile.image.model_dump(),
            "model": self.profile.model.model_dump(),
            "container": self.profile.container.model_dump(exclude={"env"}),
        }
        canonical = json.dumps(shaping, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def to_argv(deployment: Deployment) -> list[str]:
    """Render the sglang command line. Pure; golden-tested per profile and variant."""
    server = deployment.server
    model = deployment.profile.model
    spec = sglang_args.load_spec(deployment.profile.image.sglang_version)
    argv = [*server.entrypoint]

    def option(flag: str, value: object) -> None:
        if value is None or value is False:
            return
        argv.append(flag) if value is True else argv.extend([flag, str(value)])

    option("--model-path", model.container_path)
    option("--served-model-name", model.served_name)
    option("--host", server.host)
    option("--port", server.port)
    option("--tp-size", server.tp_size)
    option("--trust-remote-code", server.trust_remote_code)
    option("--quantization", server.quantization)
    option("--kv-cache-dtype", server.kv_cache_dtype)
    option("--attention-backend", server.attention_backend)
    # 0.5.23 renamed --nsa-*-backend to --dsa-*-backend; take the pinned parser's spelling.
    dsa = "--dsa" if spec.knows("--dsa-decode-backend") else "--nsa"
    option(f"{dsa}-prefill-backend", server.dsa_prefill_backend)
    option(f"{dsa}-decode-backend", server.dsa_decode_backend)
    option("--moe-runner-backend", server.moe_runner_backend)
    option("--disable-shared-experts-fusion", server.disable_shared_experts_fusion)
    option("--mem-fraction-static", server.mem_fraction_static)
    option("--chunked-prefill-size", server.chunked_prefill_size)
    # sglang renamed this flag (0.5.23 splits it per phase); take the pinned parser's spelling.
    option(spec.cuda_graph_max_bs_flag(), server.cuda_graph_max_bs)
    option("--max-running-requests", server.max_running_requests)
    option("--context-length", server.context_length)
    option("--tool-call-parser", server.tool_call_parser)
    option("--reasoning-parser", server.reasoning_parser)
    option("--watchdog-timeout", server.watchdog_timeout)
    if server.enable_metrics:
        option("--enable-metrics", True)
        # The variant becomes a label on every sglang series, so dashboards split by it.
        option("--extra-metric-labels", json.dumps({"variant": deployment.variant}))
    argv.extend(server.extra_args)
    return argv


def check_argv(deployment: Deployment) -> list[str]:
    """Render and check the argv against the pinned sglang parser; ProfileError if it rejects."""
    argv = to_argv(deployment)
    entry = len(deployment.server.entrypoint)
    version = deployment.profile.image.sglang_version
    problem = sglang_args.load_spec(version).check(argv[entry:])
    if problem:
        raise ProfileError(
            f"profile {deployment.profile.name!r} variant {deployment.variant!r}: "
            f"sglang {version} rejects the rendered flags: {problem}",
            hint="fix the profile field or extra_args; flags follow the pinned sglang's parser",
        )
    return argv


# --- loading ---------------------------------------------------------------------------------


def profile_path(name_or_path: str | None) -> Path:
    """`--profile` takes a file's stem under deploy/ or a path; default from $OPSCTL_PROFILE."""
    chosen = name_or_path or os.environ.get(DEFAULT_PROFILE_ENV) or DEFAULT_PROFILE
    candidate = Path(chosen)
    if candidate.suffix in {".yaml", ".yml"} or os.sep in chosen:
        if not candidate.is_file():
            raise ProfileError(f"profile file {chosen} does not exist", hint="check the path")
        return candidate
    deploy_dir = project_root() / "deploy"
    path = deploy_dir / f"{chosen}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in deploy_dir.glob("*.yaml"))
        raise UsageError(
            f"unknown profile {chosen!r}",
            hint=f"valid profiles: {', '.join(known)} (or pass a path to a YAML file)",
        )
    return path


def load_profile(name_or_path: str | None = None) -> Profile:
    path = profile_path(name_or_path)
    text = path.read_text()
    data, lines = _parse_yaml(path, text)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise _schema_error(path, lines, exc, prefix=()) from None
    for name in profile.variants:
        try:
            profile.variant_server(name)
        except ValidationError as exc:
            raise _schema_error(path, lines, exc, prefix=("variants", name, "server")) from None
        deployment = profile.resolve(name)
        problem = patchset.variant_support_problem(deployment, check_argv(deployment))
        if problem:
            raise ProfileError(
                f"{path}: variant {name!r} cannot work on sglang {profile.image.sglang_version}: "
                f"{problem}",
                hint="pin a sglang version whose patch set supports it, or drop the variant",
            )
    return profile


def _schema_error(
    path: Path, lines: dict[tuple, int], exc: ValidationError, prefix: tuple
) -> ProfileError:
    first = exc.errors()[0]
    loc = (*prefix, *first["loc"])
    line = _line_for(loc, lines)
    field = ".".join(str(part) for part in loc) or "(top level)"
    where = f"{path}:{line}" if line else str(path)
    return ProfileError(
        f"{where}: {field}: {first['msg']}",
        hint=f"{len(exc.errors())} problem(s) here; `opsctl profile schema` prints the schema",
    )


def profile_schema() -> dict[str, Any]:
    return Profile.model_json_schema()


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None,
                f"duplicate key {key!r} (first at line {seen[key]})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(path: Path, text: str) -> tuple[Any, dict[tuple, int]]:
    try:
        node = yaml.compose(text, Loader=_StrictLoader)
        loader = _StrictLoader(text)
        try:
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProfileError(f"{where}: invalid YAML: {reason}", hint="fix the YAML syntax") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile must be a YAML mapping", hint="see deploy/sim.yaml")
    lines: dict[tuple, int] = {}
    if node is not None:
        _index_lines(node, (), lines)
    return data, lines


def _index_lines(node: yaml.Node, loc: tuple, lines: dict[tuple, int]) -> None:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            child = (*loc, key_node.value)
            lines[child] = key_node.start_mark.line + 1
            _index_lines(value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, (*loc, index), lines)


def _line_for(loc: tuple, lines: dict[tuple, int]) -> int | None:
    # pydantic locations may name a key that is missing; fall back to the nearest parent.
    for end in range(len(loc), -1, -1):
        key = tuple(str(p) if not isinstance(p, int) else p for p in loc[:end])
        if key in lines:
            return lines[key]
    return None
