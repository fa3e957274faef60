"""The smoke report: its JSON models, reading and writing it, and what its verdict means.

`--compare-with` reads a report recorded from another variant, compares the greedy outputs per
prompt and records where they first diverge; the verdict maps the report onto the CLI's exit
codes (4 unreachable, 5 failed). Fields added since schema 1 was first written are optional,
so older reports still load as references.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from opsctl.core.errors import OpsctlError, ServerUnreachable, SmokeError, UsageError
from opsctl.core.files import atomic_write_text, read_bounded
from opsctl.core.partial import PartialReport
from opsctl.traffic.client import Api
from opsctl.traffic.evals.divergence import Divergence, GreedyOutput, locate_divergence
from opsctl.traffic.evals.gsm8k import EvalItem, EvalResult
from opsctl.traffic.evals.probes import ProbeResult
from opsctl.traffic.served import ModelResolution
from opsctl.traffic.settings import SmokeSettings

SCHEMA_VERSION: Literal[2] = 2  # 2: slo records objectives by quantile (no p50-only fields)
MAX_REPORT_BYTES = 256 << 20  # a reference report, GSM8K outputs included

CheckStatus = Literal["pass", "fail", "skip"]
ServerKind = Literal["sglang", "openai", "unknown"]


class CheckResult(BaseModel):
    name: str
    status: CheckStatus
    duration_s: float
    detail: str
    sglang_only: bool = False


class GenerationRecord(BaseModel):
    """One greedy generation; `--compare-with` compares `text` per `prompt_id`."""

    prompt_id: str
    prompt: str
    max_tokens: int
    text: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


class StreamRecord(BaseModel):
    """Streaming requests: per-request TTFT/TPOT, ITL pooled over all gaps."""

    requests: int
    ok: int
    max_tokens: int
    ttft_s: list[float]
    tpot_s: list[float]
    output_tokens: list[int]
    token_count_source: str  # "usage" (server's usage chunk), "chunks" (counted), or mixed
    ttft_p50_s: float | None = None
    tpot_p50_s: float | None = None
    itl_p50_s: float | None = None
    itl_p90_s: float | None = None
    itl_note: str | None = None  # why ITL is per chunk, split, or not measurable
    errors: list[str] = []


class ObjectiveRecord(BaseModel):
    """One profile objective judged over this run: its quantile, threshold, what was measured."""

    quantile: float
    threshold_ms: float
    observed_ms: float | None = None  # this run's `quantile`-quantile (nearest rank)
    within_share: float | None = None  # share of this run's requests at or under the threshold


class SloRecord(BaseModel):
    tpot: ObjectiveRecord | None = None
    ttft: ObjectiveRecord | None = None


class SmokeReport(PartialReport):
    """The JSON written by `opsctl smoke` (schema_version bumps on any incompatible change)."""

    schema_version: Literal[2] = SCHEMA_VERSION  # a report of another version is refused
    kind: Literal["smoke"] = "smoke"
    started_at: str
    duration_s: float
    base_url: str
    profile: str | None = None
    variant: str | None = None
    api: Api = "completions"
    api_key: str | None = None  # masked: "****" + last 4, or None when no key was used
    server_kind: ServerKind = "unknown"
    reachable: bool = True
    model: ModelResolution | None = None
    checks: list[CheckResult]
    generations: list[GenerationRecord] = []
    stream: StreamRecord | None = None
    slo: SloRecord = SloRecord()
    compared_with: str | None = None
    divergence: Divergence | None = None  # where the greedy outputs first differ from it
    gsm8k: EvalResult | None = None  # `--eval gsm8k`: accuracy, its CI and every output
    gsm8k_divergence: Divergence | None = None  # vs the reference's GSM8K outputs (no verdict)
    long_context: list[ProbeResult] | None = None  # `--long-context`
    # What the server runs, as `up` records it; only `id` is compared, when both reports have it.
    checkpoint: dict[str, Any] | None = None
    warnings: list[str] = []  # printed, never a verdict
    settings: SmokeSettings | None = None  # what it ran with (traffic.settings); None: older
    passed: bool

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)


def load_reference(path: Path) -> SmokeReport:
    try:
        return SmokeReport.model_validate_json(read_bounded(path, "--compare-with",
                                                            MAX_REPORT_BYTES))
    except FileNotFoundError:
        raise UsageError(f"--compare-with {path}: no such file",
                         hint="pass a JSON report written by `opsctl smoke --json`") from None
    except (ValidationError, ValueError) as exc:
        raise UsageError(f"--compare-with {path}: not a smoke report ({type(exc).__name__})",
                         hint="pass a JSON report written by `opsctl smoke --json`") from None


def write_report(report: SmokeReport, path: Path) -> None:
    """Write the JSON afresh (never appended), atomically."""
    atomic_write_text(path, report.model_dump_json(indent=2) + "\n")


def compare_generations(
    generations: list[GenerationRecord], reference: SmokeReport
) -> tuple[CheckStatus, str, Divergence | None]:
    """Greedy outputs of this run against the reference's: the verdict and the first divergence."""
    mine = {g.prompt_id: g for g in generations}
    who = f"variant {reference.variant!r}" if reference.variant else reference.base_url
    unlike = [theirs.prompt_id for theirs in reference.generations
              if (ours := mine.get(theirs.prompt_id)) is not None
              and (ours.prompt != theirs.prompt or ours.max_tokens != theirs.max_tokens)]
    if unlike:
        return "fail", f"cannot compare with {who}: different prompt or max_tokens for " + \
            ", ".join(unlike), None
    divergence = locate_divergence(
        [GreedyOutput(g.prompt_id, g.text) for g in reference.generations],
        [GreedyOutput(g.prompt_id, g.text) for g in generations])
    extra = sorted(set(mine) - {g.prompt_id for g in reference.generations})
    if divergence is not None:
        differing = sum(g.prompt_id not in mine or mine[g.prompt_id].text != g.text
                        for g in reference.generations)
        return "fail", (f"greedy outputs differ from {who} in {differing} of "
                        f"{len(reference.generations)} prompts; first: {divergence.describe()} "
                        "(reference vs this run)"), divergence
    if extra:
        return "fail", f"not in the {who} reference: {', '.join(extra)}", None
    return "pass", f"{len(mine)} greedy outputs identical to {who}", None


def compare_eval_outputs(current: EvalResult, reference: EvalResult) -> Divergence | None:
    """Where the GSM8K greedy outputs first differ, when both runs asked the same prompts.

    Informational: requests batched together need not give bit-identical greedy outputs, so
    the accuracy gate, not this, is the verdict. None when identical or not comparable.
    """
    same_prompts = (current.dataset_sha256, current.shots_sha256, current.num_shots,
                    current.max_tokens) == (reference.dataset_sha256, reference.shots_sha256,
                                            reference.num_shots, reference.max_tokens)
    if not same_prompts:
        return None
    # Only the questions both runs asked: a longer reference is cut to this run's length.
    return locate_divergence(_eval_outputs(reference.items[:len(current.items)]),
                             _eval_outputs(current.items))


def _eval_outputs(items: Sequence[EvalItem]) -> list[GreedyOutput]:
    return [GreedyOutput(f"line {item.line}", item.text if item.error is None else None)
            for item in items]


def checkpoint_warning(current: dict[str, Any] | None,
                       reference: dict[str, Any] | None) -> str | None:
    """A warning when both reports name their checkpoint and the ids differ."""
    ours, theirs = (current or {}).get("id"), (reference or {}).get("id")
    if ours is None or theirs is None or ours == theirs:
        return None
    return (f"checkpoint {ours!r} differs from the reference's {theirs!r}: "
            "outputs of different weights are not expected to match")


def _compare_failed(report: SmokeReport) -> tuple[str, str] | None:
    """Where the outputs first diverged."""
    divergence = report.divergence
    if divergence is None:
        return None
    at = "" if divergence.unit == "missing" else f" at {divergence.unit} {divergence.offset}"
    return (f"compare (first divergence: request {divergence.request_index} "
            f"({divergence.request_id}){at})", "")


def _gsm8k_failed(report: SmokeReport) -> tuple[str, str] | None:
    """The accuracy's verdict, and how to tell a regression from the model's own level."""
    if report.gsm8k is None:
        return None
    return (f"gsm8k ({report.gsm8k.score.verdict})",
            "run the baseline variant with the same --eval to tell a regression from the "
            "model's own level")


def _long_context_failed(report: SmokeReport) -> tuple[str, str] | None:
    """The probes that failed, and what failures only at the larger sizes point at."""
    if report.long_context is None:
        return None
    missed = [p.name for p in report.long_context if not p.passed]
    return (f"long_context ({', '.join(missed)} failed)",
            "a pass key missed only at the larger sizes points at the long-context attention "
            "path")


# A failed check -> how the one-line error names it, and a hint ("" for none).
_FAILED_CHECKS: dict[str, Callable[[SmokeReport], tuple[str, str] | None]] = {
    "compare": _compare_failed,
    "gsm8k": _gsm8k_failed,
    "long_context": _long_context_failed,
}


def verdict_error(report: SmokeReport, json_path: Path) -> OpsctlError | None:
    """The error the CLI raises for this report: exit 4 unreachable, 5 failed, None passed.

    One line naming each failed check; an accuracy or probe failure says its numbers there.
    A partial run (Ctrl-C, crash) is exit 130 or 1, after the report was written.
    """
    stopped = report.stop_error("smoke", json_path)
    if stopped is not None:
        return stopped
    if not report.reachable:
        why = next((c.detail for c in report.checks if c.status == "fail"), "")
        return ServerUnreachable(
            f"smoke: the server at {report.base_url} is not serving" + (f" ({why})" if why else ""),
            hint=f"start it (`opsctl up`) or check --base-url; report in {json_path}",
        )
    if report.passed:
        return None
    failed = [c.name for c in report.checks if c.status == "fail"]
    hints = [f"details in the table above and in {json_path}"]
    said = {name: name for name in failed}
    for name, explain in _FAILED_CHECKS.items():
        if name in said:
            explained = explain(report)
            if explained is not None:
                said[name], hint = explained
                if hint:
                    hints.append(hint)
    return SmokeError(f"smoke failed: {', '.join(said.values())}", hint="; ".join(hints))
