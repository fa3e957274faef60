"""smoke's accuracy stages: GSM8K few-shot accuracy and the long-context probes.

Agreement between two variants (`--compare-with`) says nothing when both are wrong; these say
whether the answers are right. The plan is settled before the first request: the profile's
`eval:` section with the command line's overrides on top, and every dataset read and checked
against its sha256 pin, so a wrong file is bad usage (exit 2) before the server is asked
anything. Nothing is downloaded: the files are local, and the probes are generated here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opsctl.config.datasets import GSM8K_TEST
from opsctl.config.evalconfig import (
    DEFAULT_QUESTIONS,
    DEFAULT_SHOTS,
    EvalConfig,
    Gsm8kConfig,
    resolve_path,
)
from opsctl.core.errors import UsageError
from opsctl.traffic.client import Api, TrafficClient
from opsctl.traffic.evals.dataset import Dataset, public_file
from opsctl.traffic.evals.gsm8k import EvalResult, Gsm8kPlan, run_gsm8k
from opsctl.traffic.evals.probes import ProbeAsk, ProbeResult, run_long_context_probes
from opsctl.traffic.smoke_report import CheckStatus

# (path, sha256 pin) -> the dataset; raises DatasetError (exit 2) for a missing or other file.
DatasetLoader = Callable[[Path, str], Dataset]

_GUIDE = "docs/smoke-and-bench.md, 'Accuracy'"
EVALS = ("gsm8k",)


@dataclass(frozen=True)
class EvalRequest:
    """What the command line asked for; None leaves the profile's setting."""

    gsm8k: bool = False
    questions: int | None = None
    dataset: Path | None = None
    sha256: str | None = None
    threshold: float | None = None
    long_context: bool = False
    score_thinking: bool | None = None  # None: the profile's eval.gsm8k.score_thinking


def eval_request(name: str | None, *, questions: int | None = None,
                 dataset: Path | None = None, sha256: str | None = None,
                 threshold: float | None = None, long_context: bool = False,
                 score_thinking: bool | None = None) -> EvalRequest:
    """The command line's `--eval NAME` and its options; NAME must be one smoke knows."""
    if name is not None and name not in EVALS:
        raise UsageError(f"--eval {name!r}: unknown eval", hint=f"choose {', '.join(EVALS)}")
    return EvalRequest(gsm8k=name == "gsm8k", questions=questions, dataset=dataset,
                       sha256=sha256, threshold=threshold, long_context=long_context,
                       score_thinking=score_thinking)


@dataclass(frozen=True)
class LongContextPlan:
    sizes: tuple[int, ...]
    prefix_pair_tokens: int | None


@dataclass(frozen=True)
class EvalPlan:
    gsm8k: Gsm8kPlan | None = None
    long_context: LongContextPlan | None = None


def plan_evals(request: EvalRequest, config: EvalConfig | None,
               load: DatasetLoader) -> EvalPlan:
    """The evals to run, datasets loaded and verified; UsageError (exit 2) when they cannot."""
    overrides = request.questions, request.dataset, request.sha256, request.threshold
    if not request.gsm8k and any(v is not None for v in overrides):
        raise UsageError("--eval-questions, --eval-dataset, --eval-sha256 and --eval-threshold "
                         "apply to --eval gsm8k",
                         hint="add --eval gsm8k, or drop them")
    if not request.gsm8k and request.score_thinking is not None:
        raise UsageError("--eval-score-thinking applies to --eval gsm8k",
                         hint="add --eval gsm8k, or drop it")
    config = config or EvalConfig()
    long_context = config.long_context
    return EvalPlan(
        gsm8k=_plan_gsm8k(request, config.gsm8k, load) if request.gsm8k else None,
        long_context=LongContextPlan(tuple(long_context.sizes), long_context.prefix_pair_tokens)
        if request.long_context else None,
    )


def _plan_gsm8k(request: EvalRequest, config: Gsm8kConfig | None,
                load: DatasetLoader) -> Gsm8kPlan:
    """Every setting checked first, then the files read (a read is the slow, last step)."""
    source = _gsm8k_source(request, config)
    threshold = _gsm8k_threshold(request, config)
    dataset = load(*(source or (public_file(GSM8K_TEST), GSM8K_TEST.sha256)))
    shots_from = dataset
    if config is not None and config.shots_from is not None and config.shots_sha256 is not None:
        shots_from = load(resolve_path(config.shots_from), config.shots_sha256)
    questions = request.questions or (config.questions if config else DEFAULT_QUESTIONS)
    if questions > len(dataset.items):
        raise UsageError(f"{_ASKED}: {questions} questions asked, {dataset.path} holds "
                         f"{len(dataset.items)}",
                         hint="lower --eval-questions (or eval.gsm8k.questions)")
    shots = config.shots if config else DEFAULT_SHOTS
    if shots > len(shots_from.items):
        raise UsageError(f"{_ASKED}: {shots} few-shot examples asked, {shots_from.path} "
                         f"holds {len(shots_from.items)}", hint="lower eval.gsm8k.shots")
    score_thinking = request.score_thinking
    if score_thinking is None:
        score_thinking = config is not None and config.score_thinking
    return Gsm8kPlan(dataset=dataset, shots_from=shots_from, questions=questions, shots=shots,
                     threshold=threshold, score_thinking=score_thinking)


_ASKED = "--eval gsm8k"


def _gsm8k_source(request: EvalRequest, config: Gsm8kConfig | None) -> tuple[Path, str] | None:
    """The dataset file and its pinned sha256: --eval-dataset, else the profile's; None for
    the pinned public test split (downloaded once)."""
    if (request.dataset is None) != (request.sha256 is None):
        raise UsageError("--eval-dataset and --eval-sha256 go together",
                         hint="pin the file: pass what `sha256sum FILE` prints as --eval-sha256")
    if request.dataset is not None and request.sha256 is not None:
        return request.dataset, request.sha256
    if config is None:
        raise UsageError(f"{_ASKED}: the profile has no eval.gsm8k section and no "
                         "--eval-dataset was given",
                         hint=f"fetch GSM8K's test.jsonl on this host and pin it ({_GUIDE}), "
                              "then add eval.gsm8k to the profile or pass --eval-dataset PATH "
                              "--eval-sha256 HEX --eval-threshold SHARE")
    if config.dataset is not None and config.sha256 is not None:
        return resolve_path(config.dataset), config.sha256
    return None


def _gsm8k_threshold(request: EvalRequest, config: Gsm8kConfig | None) -> float:
    """The accuracy to reach: --eval-threshold, else the profile's; in (0, 1]."""
    threshold = request.threshold
    if threshold is None and config is not None:
        threshold = config.threshold
    if threshold is None or not 0.0 < threshold <= 1.0:
        raise UsageError(f"{_ASKED} needs an accuracy threshold in (0, 1], got {threshold}",
                         hint="set eval.gsm8k.threshold in the profile or pass --eval-threshold")
    return threshold


# Receives a progress line of an eval as it runs ("gsm8k: 30/60 answered, 12s").
EvalProgress = Callable[[str], None]


def _gsm8k_progress(progress: EvalProgress | None) -> Callable[[int, int], None] | None:
    """A line at every tenth of the questions (and the last), with the time so far."""
    if progress is None:
        return None
    start = time.monotonic()

    def answered(done: int, total: int) -> None:
        if done == total or done % max(1, total // 10) == 0:
            progress(f"gsm8k: {done}/{total} answered, {time.monotonic() - start:.0f}s")
    return answered


async def gsm8k_check(client: TrafficClient, plan: Gsm8kPlan, *, model: str, api: Api,
                      request_timeout_s: float, remaining_s: float,
                      progress: EvalProgress | None = None
                      ) -> tuple[CheckStatus, str, EvalResult]:
    """Ask the planned questions greedily; pass when the accuracy reaches the threshold."""
    result = await run_gsm8k(client, plan, model=model, api=api,
                             request_timeout_s=request_timeout_s, overall_timeout_s=remaining_s,
                             on_progress=_gsm8k_progress(progress))
    return ("pass" if result.score.passed else "fail"), result.score.verdict, result


async def long_context_check(client: TrafficClient, plan: LongContextPlan, *, model: str,
                             api: Api, request_timeout_s: float, remaining_s: float,
                             progress: EvalProgress | None = None
                             ) -> tuple[CheckStatus, str, list[ProbeResult] | None]:
    """The needle probes at each size, then the prefix pair; every one must pass."""
    start = time.monotonic()

    def probing(done: int, total: int, name: str) -> None:
        if progress is not None:
            progress(f"long-context probes: {done}/{total} done, {name} next, "
                     f"{time.monotonic() - start:.0f}s")
    try:
        async with asyncio.timeout(remaining_s):
            ask = ProbeAsk(model=model, api=api, timeout_s=min(request_timeout_s, remaining_s))
            probes = await run_long_context_probes(
                client, ask, sizes=plan.sizes, prefix_pair_tokens=plan.prefix_pair_tokens,
                on_progress=probing)
    except TimeoutError:
        return "fail", f"overall timeout reached during the probes ({remaining_s:.0f}s left)", None
    failed = [probe for probe in probes if not probe.passed]
    if failed:
        return "fail", "; ".join(f"{p.name}: {p.error or p.detail}" for p in failed), probes
    return "pass", f"{len(probes)} probes passed: " + ", ".join(p.name for p in probes), probes
