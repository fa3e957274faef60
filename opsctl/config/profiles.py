"""Deployment profiles: strict pydantic models of `deploy/<name>.yaml`, variants resolved.

One `Profile` is loaded and validated once per command; a variant is an overlay of server
settings, environment and, when it needs another sglang release, the image's release and base
(never a copy), and `Profile.resolve(variant)` returns the `Deployment` every command works
from: it carries its own `ImageSpec`, so flags, patch set, build plan and labels follow the
release the variant runs. The sglang argv is rendered at the last moment by `to_argv`, checked
against that release's own argument parser and judged by its recorded facts (releases.py).

One image per sglang release: every image of a pinned release has that release's patch set
applied, and a variant that does not run the patch gets the same image with the runtime switch
off (`requires_patch: false` renders it 0), so `baseline` and `gathercast` share one image.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import PrivateAttr, ValidationError, field_validator, model_validator

from opsctl.argspec import spec as sglang_args
from opsctl.argspec import stack
from opsctl.config import releases
from opsctl.config.evalconfig import EvalConfig
from opsctl.config.profile_checks import check_name, extra_args_problem
from opsctl.config.profile_models import (
    DEFAULT_REVISION,
    DRAFT_MODEL_FLAG,
    NCCL_P2P_LEVEL_ENV,
    NEXTN_ALGORITHMS,
    PATCH_SWITCH_ENV,
    ContainerSettings,
    ImageSpec,
    ModelSpec,
    Readiness,
    ServerSettings,
    StrictModel,
    Variant,
)
from opsctl.config.profile_yaml import (
    Lines,
    all_at_once,
    parse_yaml,
    read_profile,
    schema_problems,
    where,
)
from opsctl.config.sloconfig import Slo
from opsctl.config.support import variant_support_problem
from opsctl.core.errors import ProfileError, UsageError
from opsctl.core.paths import project_root

DEFAULT_PROFILE_ENV = "OPSCTL_PROFILE"
EXTENDS_KEY = "extends"
DEFAULT_PROFILE = "sim"


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
    eval: EvalConfig = EvalConfig()
    variants: dict[str, Variant]
    default_variant: str

    _name = field_validator("name")(check_name)
    # The file load_profile read it from: shown, never part of the profile's content or hash.
    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source

    @model_validator(mode="after")
    def _default_variant_exists(self) -> Profile:
        if self.default_variant not in self.variants:
            raise ValueError(f"default_variant {self.default_variant!r} is not among the variants")
        reference = self.eval.reference
        if reference is not None and reference not in self.variants:
            raise ValueError(f"eval.reference {reference!r} is not among the variants")
        if reference is not None and self.eval.gsm8k is None:
            raise ValueError("eval.reference compares GSM8K accuracy: it needs eval.gsm8k")
        return self

    def variant_server(self, variant: str) -> ServerSettings:
        overlay = self.variants[variant].server
        return ServerSettings.model_validate({**self.server.model_dump(), **overlay})

    def variant_image(self, variant: str) -> ImageSpec:
        overlay = self.variants[variant].image.model_dump(exclude_none=True)
        return ImageSpec.model_validate({**self.image.model_dump(), **overlay})

    def variant_model(self, variant: str) -> ModelSpec:
        """The profile's model; for a variant drafting on the NextN layer, `model.mtp`'s
        checkpoint; then the variant's own overlay."""
        base = self.model.model_dump()
        mtp = self.model.mtp
        if mtp is not None and drafts_on_nextn(self.variant_server(variant)):
            # Another checkpoint: the profile's repo and revision are not its source.
            base.update(host_path=mtp.host_path, repo=mtp.repo,
                        revision=mtp.revision or DEFAULT_REVISION)
        overlay = self.variants[variant].model.model_dump(exclude_none=True)
        if overlay.get("repo", base["repo"]) != base["repo"]:  # a revision is of its own repo
            overlay.setdefault("revision", DEFAULT_REVISION)
        return ModelSpec.model_validate({**base, **overlay})

    def resolve(self, variant: str | None = None) -> Deployment:
        chosen = variant or self.default_variant
        if chosen not in self.variants:
            raise UsageError(
                f"profile {self.name!r} has no variant {chosen!r}",
                hint=f"valid variants: {', '.join(sorted(self.variants))}",
            )
        spec = self.variants[chosen]
        rendered = {PATCH_SWITCH_ENV: "1" if spec.requires_patch else "0"}
        if self.container.nccl_p2p_level is not None:
            rendered[NCCL_P2P_LEVEL_ENV] = self.container.nccl_p2p_level
        return Deployment(
            profile=self,
            variant=chosen,
            image=self.variant_image(chosen),
            model=self.variant_model(chosen),
            server=self.variant_server(chosen),
            env={**self.container.env, **spec.env, **rendered},
            patched=spec.requires_patch,
            expect=spec.expect,
        )


class Deployment(StrictModel):
    """A profile with one variant applied: what `up`, `smoke` and `bench` act on."""

    profile: Profile
    variant: str
    image: ImageSpec  # the profile's, with the variant's overlay: the release it runs
    model: ModelSpec  # the profile's, with the variant's overlay: the checkpoint it serves
    server: ServerSettings
    env: dict[str, str]
    patched: bool
    expect: dict[str, str | int | None] = {}  # not server-shaping: not hashed

    def config_hash(self) -> str:
        """sha256 of everything that shapes the running server: the `up` idempotence key.

        Secrets are in it by name only ($NAME, as `to_argv` renders them without a host env).
        """
        container = self.profile.container
        shaping = {
            "argv": to_argv(self),
            "env": {**self.env, **{name: f"${name}" for name in container.env_from_host}},
            "image": self.image.model_dump(),
            # Where the weights come from (repo, revision, token) does not shape the server;
            # the folder mounted does.
            "model": self.model.model_dump(exclude={"repo", "revision", "token_env", "mtp"}),
            # The env above already holds what nccl_p2p_level and env_from_host render; the
            # pod resources are `render k8s`'s only (a change leaves `up`'s server as it is).
            "container": container.model_dump(exclude={
                "env", "nccl_p2p_level", "env_from_host", "cpu_request", "memory_request",
                "memory_limit"}),
        }
        canonical = json.dumps(shaping, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def host_env(self, environ: Mapping[str, str] | None) -> dict[str, str]:
        """container.env_from_host: the host's values, or `$NAME` without a host env (dry run)."""
        return {name: _from_host(name, "container.env_from_host", environ)
                for name in self.profile.container.env_from_host}


def _from_host(name: str, field: str, environ: Mapping[str, str] | None) -> str:
    if environ is None:
        return f"${name}"
    if name not in environ:
        raise ProfileError(f"{field} names ${name}, which is not set in this environment",
                           hint=f"export {name}=... before running opsctl")
    return environ[name]


def typed_options(deployment: Deployment, environ: Mapping[str, str] | None = None
                  ) -> list[tuple[str, str, object]]:
    """(field, flag, value) of every typed setting, in argv order; None or False renders no flag.

    Secrets named by environment variable take the host's value from `environ`, or `$NAME`
    without one (what `profile show`, `--dry-run`, labels and the config hash see).
    """
    server = deployment.server
    model = deployment.model
    spec = sglang_args.load_spec(deployment.image.sglang_version)
    # 0.5.23 renamed --nsa-*-backend to --dsa-*-backend; take the pinned parser's spelling.
    dsa = "--dsa" if spec.knows("--dsa-decode-backend") else "--nsa"
    secrets = {field: None if name is None else _from_host(name, f"server.{field}", environ)
               for field, name in (("api_key_env", server.api_key_env),
                                   ("admin_api_key_env", server.admin_api_key_env))}
    return [
        ("model.container_path", "--model-path", model.container_path),
        ("model.served_name", "--served-model-name", model.served_name),
        *((f"server.{name}", f"--{name.replace('_', '-')}", getattr(server, name)) for name in (
            "host", "port", "tp_size")),
        # One host renders no flag (sglang's default), so single-host argv stay as they were.
        ("server.nnodes", "--nnodes", server.nnodes if server.nnodes > 1 else None),
        *((f"server.{name}", f"--{name.replace('_', '-')}", getattr(server, name)) for name in (
            "trust_remote_code", "quantization", "kv_cache_dtype", "attention_backend")),
        ("server.dsa_prefill_backend", f"{dsa}-prefill-backend", server.dsa_prefill_backend),
        ("server.dsa_decode_backend", f"{dsa}-decode-backend", server.dsa_decode_backend),
        *((f"server.{name}", f"--{name.replace('_', '-')}", getattr(server, name)) for name in (
            "moe_runner_backend", "disable_shared_experts_fusion", "mem_fraction_static",
            "chunked_prefill_size", "disable_prefill_cuda_graph", "speculative_algorithm",
            "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")),
        # sglang renamed this flag (0.5.23 splits it per phase); take the pinned parser's spelling.
        ("server.cuda_graph_max_bs", spec.cuda_graph_max_bs_flag(), server.cuda_graph_max_bs),
        *((f"server.{name}", f"--{name.replace('_', '-')}", getattr(server, name)) for name in (
            "max_running_requests", "context_length", "tool_call_parser", "reasoning_parser",
            "watchdog_timeout")),
        ("server.api_key_env", "--api-key", secrets["api_key_env"]),
        ("server.admin_api_key_env", "--admin-api-key", secrets["admin_api_key_env"]),
        ("server.enable_metrics", "--enable-metrics", server.enable_metrics),
        # The variant becomes a label on every sglang series, so dashboards split by it.
        ("server.enable_metrics", "--extra-metric-labels",
         json.dumps({"variant": deployment.variant}) if server.enable_metrics else None),
    ]


def to_argv(deployment: Deployment, environ: Mapping[str, str] | None = None) -> list[str]:
    """Render the sglang command line. Pure; golden-tested per profile and variant."""
    argv = [*deployment.server.entrypoint]
    for _, flag, value in typed_options(deployment, environ):
        if value is True:
            argv.append(flag)
        elif value is not None and value is not False:
            argv.extend([flag, str(value)])
    argv.extend(deployment.server.extra_args)
    return argv


def check_argv(deployment: Deployment, environ: Mapping[str, str] | None = None) -> list[str]:
    """Render and check the argv against the pinned sglang parser; ProfileError if it rejects."""
    argv = to_argv(deployment, environ)
    entry = len(deployment.server.entrypoint)
    version = deployment.image.sglang_version
    problem = sglang_args.load_spec(version).check(argv[entry:])
    if problem:
        raise ProfileError(
            f"profile {deployment.profile.name!r} variant {deployment.variant!r}: "
            f"sglang {version} rejects the rendered flags: {problem}",
            hint="fix the profile field or extra_args; flags follow the pinned sglang's parser",
        )
    return argv


# --- loading ---------------------------------------------------------------------------------


def drafts_on_nextn(server: ServerSettings) -> bool:
    """EAGLE/NEXTN with no draft model of its own: the draft is the checkpoint's NextN layer."""
    algorithm = (server.speculative_algorithm or "").upper()
    own_draft = any(arg == DRAFT_MODEL_FLAG or arg.startswith(DRAFT_MODEL_FLAG + "=")
                    for arg in server.extra_args)
    return algorithm in NEXTN_ALGORITHMS and not own_draft


def profile_is_path(name_or_path: str) -> bool:
    """Whether `--profile` names a YAML file (else a file's stem under deploy/)."""
    return Path(name_or_path).suffix in {".yaml", ".yml"} or os.sep in name_or_path


def profile_path(name_or_path: str | None) -> Path:
    """`--profile` takes a file's stem under deploy/ or a path; default from $OPSCTL_PROFILE."""
    chosen = name_or_path or os.environ.get(DEFAULT_PROFILE_ENV) or DEFAULT_PROFILE
    candidate = Path(chosen)
    if profile_is_path(chosen):
        if not candidate.exists():
            raise ProfileError(f"profile file {chosen} does not exist", hint="check the path")
        return candidate  # read_profile says why a directory or an unreadable file is refused
    deploy_dir = project_root() / "deploy"
    path = deploy_dir / f"{chosen}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in deploy_dir.glob("*.yaml"))
        raise UsageError(
            f"unknown profile {chosen!r}",
            hint=f"valid profiles: {', '.join(known)} (or pass a path to a YAML file)",
        )
    return path


def release_findings(deployment: Deployment) -> releases.Findings:
    """What the release a variant pins says about it: errors refuse the profile, warnings are shown.

    A simulator image runs no sglang: the release's crashes and defaults do not apply to it, as
    the patch sets' layout findings do not (its flags are still checked against the parser).
    """
    if deployment.image.kind == "simulator":
        return releases.Findings(errors=[], warnings=[])
    server = deployment.server
    version = deployment.image.sglang_version
    architecture = deployment.model.architecture or ""
    findings = releases.check(
        version=version,
        architecture=architecture,
        argv=to_argv(deployment)[len(server.entrypoint):],
        env=deployment.env,
        patched=deployment.patched,
        cuda_graph_max_bs=server.cuda_graph_max_bs,
        max_running_requests=server.max_running_requests,
    )
    record = stack.load(version)
    problem = record.model_problem(deployment.profile.model.repo, architecture) if record else None
    if problem:
        findings.errors.insert(0, f"{problem}; pin a release whose transformers knows the model "
                               "(see `opsctl sglang-args stack`)")
    return findings


def load_profile(name_or_path: str | None = None) -> Profile:
    """The profile, checked whole: every problem found is in the one ProfileError raised (the
    schema's first; then each variant's overlays and what its release says of it)."""
    path = profile_path(name_or_path)
    data, lines = profile_document(path)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise all_at_once(schema_problems(path, lines, exc, (), Profile)) from None
    problems: list[ProfileError] = []
    for name in profile.variants:
        found = _overlay_problems(profile, name, path, lines)
        if not found:
            try:
                _check_variant(profile.resolve(name), path, lines)
            except ProfileError as exc:
                found = [exc]
        problems += found
    if problems:
        raise all_at_once(problems)
    profile._source = path.resolve()
    return profile


def profile_document(path: Path) -> tuple[dict[str, Any], Lines]:
    """The profile's document and the line of each of its own keys. A profile that says
    `extends: <base>` (another profile under deploy/, itself extending none) is the base's
    document with this file's keys laid over it: mappings key by key, any other value replaced.
    A family member names only what differs from the base, so every shared setting has one
    source (the base file)."""
    data, lines = parse_yaml(path, read_profile(path))
    if EXTENDS_KEY not in data:
        return data, lines
    base_name = data.pop(EXTENDS_KEY)
    at = where(path, (EXTENDS_KEY,), lines)
    hint = "extends names a profile under deploy/ by its file's stem, e.g. glm5-nvfp4-rtx6000"
    if not isinstance(base_name, str) or profile_is_path(base_name) or not base_name.strip():
        raise ProfileError(f"{at}: extends must name a profile under deploy/", hint=hint)
    try:
        base_path = profile_path(base_name)
    except UsageError as exc:
        raise ProfileError(f"{at}: extends names {exc.message}", hint=exc.hint or hint) from None
    if base_path.resolve() == path.resolve():
        raise ProfileError(f"{at}: a profile cannot extend itself", hint=hint)
    base, _ = parse_yaml(base_path, read_profile(base_path))
    if EXTENDS_KEY in base:
        raise ProfileError(f"{at}: {base_name} itself extends another profile; one level only",
                           hint="extend the profile it extends, or copy what differs")
    return _laid_over(base, data), lines


def _laid_over(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            merged[key] = _laid_over(below, value)
        else:
            merged[key] = value
    return merged


def _overlay_problems(profile: Profile, name: str, path: Path, lines: Lines) -> list[ProfileError]:
    """What is wrong with the variant's image and server overlays, each a schema problem."""
    problems = []
    for part, overlay, model in (("image", profile.variant_image, ImageSpec),
                                 ("server", profile.variant_server, ServerSettings)):
        try:
            overlay(name)
        except ValidationError as exc:
            problems += schema_problems(path, lines, exc, ("variants", name, part), model)
    return problems


def _check_variant(deployment: Deployment, path: Path, lines: Lines) -> None:
    """Refuse a variant its release cannot run: parser, patch-set layout findings, release facts."""
    server, image = deployment.server, deployment.image
    # Before the parser sees them: its complaint would quote a secret's value.
    owned = {flag: field for field, flag, _ in typed_options(deployment)}
    misused = extra_args_problem(
        server.extra_args, owned, sglang_args.load_spec(image.sglang_version)
    )
    if misused:
        overlay = ("variants", deployment.variant, "server")
        loc = overlay if "extra_args" in deployment.profile.variants[deployment.variant].server \
            else ("server",)
        raise ProfileError(f"{where(path, (*loc, 'extra_args'), lines)}: {misused[0]}",
                           hint=misused[1])
    _check_expect(deployment, path, lines)
    argv = check_argv(deployment)
    problems = [] if image.kind == "simulator" else [variant_support_problem(
        image.sglang_version, patched=deployment.patched, argv=argv,
        architecture=deployment.model.architecture,
        attention_backend=server.attention_backend, kv_cache_dtype=server.kv_cache_dtype)]
    problems += release_findings(deployment).errors
    found = [problem for problem in problems if problem]
    if found:
        raise ProfileError(
            f"{where(path, ('variants', deployment.variant), lines)}: variant "
            f"{deployment.variant!r} cannot work on sglang {image.sglang_version}: "
            f"{'; '.join(found)}",
            hint="change the variant (or pin a release it can run on), or drop it",
        )


def _check_expect(deployment: Deployment, path: Path, lines: Lines) -> None:
    """A variant's `expect:` names only fields verify checks on its release (a typo passed the
    load and failed at `up`'s verify, after the server had loaded)."""
    from opsctl.config.releasefacts import facts_for

    known = facts_for(deployment.image.sglang_version)
    unknown = sorted(set(deployment.expect) - set(known or {}))
    if unknown:
        fields = ", ".join(sorted(known or {})) or "none are recorded for this release"
        raise ProfileError(
            f"{where(path, ('variants', deployment.variant, 'expect'), lines)}: expect names "
            f"field(s) verify does not check on sglang {deployment.image.sglang_version}: "
            f"{', '.join(repr(name)[:60] for name in unknown[:5])}",
            hint=f"fields verify checks: {fields}")


def profile_schema() -> dict[str, Any]:
    return Profile.model_json_schema()
