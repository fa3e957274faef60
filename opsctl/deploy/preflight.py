"""`up`'s preflight: the variant's own image loads the mounted checkpoint before any GPU is taken.

A checkpoint the image cannot load fails minutes into an 8-GPU start (transformers 4.57.1, the
pin of an older sglang, has no `glm_moe_dsa`: KeyError while sglang reads config.json). So `up`
(and `up --gate`, `decide`, `tune`, which launch through it) first runs
opsctl/deploy/preflight_probe.py in a throwaway container of the image it is about to start:
no network, no GPU, the checkpoint mounted read-only at the path the server reads, removed
whatever happens (Engine.run_to_completion). The probe says what it checks; a failure is one
line, exit 4 (LaunchError), with every other failed check listed above it, and nothing was
started. `up --skip-preflight` skips it (for experts who know the checkpoint loads).

The probe runs only where a checkpoint is mounted (`model.host_path`): the simulator profile
mounts none, and then the preflight says it was skipped and why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsctl.config.profile_models import DRAFT_MODEL_FLAG, NEXTN_ALGORITHMS
from opsctl.config.profiles import Deployment, to_argv
from opsctl.config.releases import _flag_value, _has_flag
from opsctl.core.errors import LaunchError
from opsctl.deploy import preflight_probe
from opsctl.engine.api import Engine, Mount

PREFLIGHT_TIMEOUT_S = 180.0  # an sglang image imports torch and sglang's config code: seconds
SPECULATIVE_FLAG = "--speculative-algorithm"
TRUST_REMOTE_CODE_FLAG = "--trust-remote-code"  # the probe loads as the server will
SKIP_HINT = "`opsctl up --skip-preflight` starts without it (only if you know it loads)"


@dataclass(frozen=True)
class PreflightCheck:
    check: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class PreflightResult:
    image: str
    checks: list[PreflightCheck] = field(default_factory=list)
    skipped: str | None = None  # why it did not run
    seconds: float = 0.0

    def summary(self) -> str:
        if self.skipped:
            return f"preflight skipped: {self.skipped}"
        return (f"preflight passed in {self.image} ({self.seconds:.1f} s): "
                + "; ".join(f"{c.check}: {c.detail}" for c in self.checks))


# (deployment, engine, image) -> what the preflight found; raises LaunchError on a failure.
Preflight = Callable[[Deployment, Engine, str], PreflightResult]


def is_mtp(argv: Sequence[str]) -> bool:
    """The variant drafts with the checkpoint's own NextN layer: EAGLE/NEXTN, no draft model."""
    algorithm = _flag_value(argv, SPECULATIVE_FLAG)
    return (algorithm or "").upper() in NEXTN_ALGORITHMS and _flag_value(
        argv, DRAFT_MODEL_FLAG
    ) is None


def skip_reason(deployment: Deployment) -> str | None:
    if not deployment.model.host_path:
        return "no checkpoint is mounted (model.host_path is unset)"
    return None


def probe_request(deployment: Deployment) -> dict[str, Any]:
    argv = to_argv(deployment)
    return {"model_dir": deployment.model.container_path, "mtp": is_mtp(argv),
            "strict": deployment.image.kind != "simulator",
            "trust_remote_code": _has_flag(argv, TRUST_REMOTE_CODE_FLAG)}


def probe_command(deployment: Deployment) -> list[str]:
    source = Path(preflight_probe.__file__).read_text()
    return ["python3", "-c", source, json.dumps(probe_request(deployment), sort_keys=True)]


def describe(deployment: Deployment, image: str, enabled: bool = True) -> str:
    """What `up` would run first, for --dry-run."""
    reason = "--skip-preflight" if not enabled else skip_reason(deployment)
    if reason:
        return f"preflight: skipped ({reason})"
    model = deployment.model
    request = probe_request(deployment)
    checks = "config.json and tokenizer (the image's transformers/sglang), the safetensors shards"
    if request["mtp"]:
        checks += ", the NextN (MTP) layer's weights"
    return (
        f"preflight: in a throwaway container of {image} (no network, no GPU, {model.host_path} "
        f"read-only at {model.container_path}): {checks}; a failure exits 4 before the "
        "server starts"
    )


def run_preflight(deployment: Deployment, engine: Engine, image: str) -> PreflightResult:
    """Run the probe in `image`; LaunchError with one line when anything fails."""
    reason = skip_reason(deployment)
    if reason:
        return PreflightResult(image=image, skipped=reason)
    model = deployment.model
    host_path = Path(str(model.host_path))
    if not host_path.is_dir():
        raise LaunchError(f"checkpoint folder {host_path} does not exist on this host "
                          "(model.host_path)",
                          hint="`opsctl model fetch -v VARIANT` downloads them there, or fix the "
                          "profile")
    started = time.monotonic()
    code, output = engine.run_to_completion(
        image, probe_command(deployment), timeout_seconds=PREFLIGHT_TIMEOUT_S,
        mounts=(Mount(source=str(host_path), target=model.container_path, read_only=True),))
    seconds = time.monotonic() - started
    if code == 124:
        raise LaunchError(f"preflight did not finish within {PREFLIGHT_TIMEOUT_S:.0f} s in {image}",
                          hint=SKIP_HINT)
    checks = parse_report(output)
    if checks is None:
        tail = " ".join(output.strip().splitlines()[-1:])[-200:] or "no output"
        raise LaunchError(f"preflight did not run in {image} (exit {code}): {tail}",
                          hint="the image has no working python3?; " + SKIP_HINT)
    failed = [check for check in checks if not check.ok]
    if failed or code != 0:
        first = failed[0].detail if failed else f"the probe exited {code}"
        raise LaunchError(f"{first} in {image}", hint=_hint(failed, deployment) + "; " + SKIP_HINT,
                          details=[f"preflight {c.check}: {c.detail}" for c in failed[1:]])
    return PreflightResult(image=image, checks=checks, seconds=seconds)


def _hint(failed: list[PreflightCheck], deployment: Deployment) -> str:
    names = {check.check for check in failed}
    if names & {"transformers config", "sglang config", "transformers", "sglang"}:
        return (f"this image (sglang {deployment.image.sglang_version}) cannot load the "
                "checkpoint: run a variant on a release that knows it; nothing was started")
    return (f"check the checkpoint in {deployment.model.host_path} (a partial download?); "
            "nothing was started")


def parse_report(output: str) -> list[PreflightCheck] | None:
    """The probe's JSON report: its last stdout line that parses as one (libraries may print)."""
    for line in reversed(output.splitlines()):
        if not line.startswith("{"):
            continue
        try:
            parsed = json.loads(line)
            return [PreflightCheck(str(r["check"]), bool(r["ok"]), str(r["detail"]))
                    for r in parsed["results"]]
        except (ValueError, KeyError, TypeError):
            continue
    return None
