"""GSM8K few-shot accuracy, the way sglang 0.5.23 measures it (``test/few_shot_gsm8k.py``).

What is matched, with the file:line it comes from (the code here is opsctl's own):
- prompt: each few-shot example is ``"Question: " + question + "\\nAnswer: " + answer``
  followed by a blank line, the question asked is ``"Question: " + question + "\\nAnswer:"``, and
  the prompt is the examples then the question, sent as raw text with no chat template
  (``few_shot_gsm8k.py:32-43,97``; the frontend posts it as ``text`` to ``/generate``,
  ``lang/backend/runtime_endpoint.py:157-186``); here it goes to ``/v1/completions`` as
  ``prompt``, which applies no template either;
- few-shot examples: sglang takes the first k lines of the test file itself, and its questions
  also start at line 1, so they overlap (``:79,83``); opsctl takes them from whatever pinned
  file the caller gives: a train split's first k lines avoids the overlap;
- generation: greedy (temperature 0, ``:112``), at most 512 new tokens (``:159``), stop strings
  ``"Question"``, ``"Assistant:"``, ``"<|separator|>"`` (``:101``), 5 shots and 200 questions
  by default (``:156,158``);
- scoring: the last integer of the output and of the reference answer (extract.py), accuracy =
  share of equal pairs over all questions, invalid = share without a number (``:120-129``).
  The output scored is the answer (a chat reply's ``content``); the thinking a reasoning parser
  split off is kept as evidence. ``score_thinking`` scores the thinking, a newline, then the
  answer (the text as it reads without a parser, so the answer's last number still wins when
  it has one); the report's ``scored`` says which was scored.
Requests run ``parallel`` at a time (sglang: 128 threads, ``:160``); one that fails counts as
wrong and is reported as an error, and any error fails the gate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from opsctl.config.evalconfig import DEFAULT_QUESTIONS, DEFAULT_SHOTS
from opsctl.core.errors import UsageError
from opsctl.traffic.client import Api, RequestResult, TrafficClient, generate, request_body
from opsctl.traffic.evals.dataset import Dataset, Gsm8kItem
from opsctl.traffic.evals.extract import extract_answer
from opsctl.traffic.evals.score import Score, check_threshold, score

STOP = ("Question", "Assistant:", "<|separator|>")
DEFAULT_MAX_TOKENS = 512
Scored = Literal["content", "thinking+content"]  # what the report's `scored` can say


def format_example(item: Gsm8kItem, include_answer: bool) -> str:
    text = "Question: " + item.question + "\nAnswer:"
    return text + " " + item.answer if include_answer else text


def few_shot_prefix(shots: Sequence[Gsm8kItem]) -> str:
    return "".join(format_example(item, True) + "\n\n" for item in shots)


def build_prompt(prefix: str, item: Gsm8kItem) -> str:
    return prefix + format_example(item, False)


class EvalItem(BaseModel):
    """One question: its reference label, what the model answered, and the raw output."""

    index: int
    line: int
    label: int
    predicted: int | None = None  # None: no integer in the output (sglang's INVALID)
    correct: bool = False
    text: str | None = None  # the answer (a chat reply's `content`)
    # The thinking a reasoning parser split off (`reasoning_content`): kept as evidence and not
    # scored unless the run's `scored` is "thinking+content", so a number in the trace cannot
    # pass for the answer.
    reasoning: str | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None
    error: str | None = None


class EvalResult(BaseModel):
    """The JSON record of one eval run; ``items`` keeps every greedy output for comparison."""

    eval: Literal["gsm8k"] = "gsm8k"
    dataset: str
    dataset_sha256: str
    shots_source: str
    shots_sha256: str
    num_shots: int
    max_tokens: int
    stop: list[str]
    api: Api
    # What was scored: the answer alone (the default), or the thinking then the answer.
    scored: Scored = "content"
    duration_s: float
    score: Score
    items: list[EvalItem]


def select(dataset: Dataset, shots_from: Dataset, num_questions: int, num_shots: int
           ) -> tuple[tuple[Gsm8kItem, ...], tuple[Gsm8kItem, ...]]:
    """(questions, shots): the first ``num_questions`` and the first ``num_shots`` lines."""
    if num_questions < 1 or num_shots < 0:
        raise UsageError(f"need at least one question and no negative shot count, got "
                         f"{num_questions} questions and {num_shots} shots",
                         hint="e.g. --eval-questions 50 (eval.gsm8k.shots: 5)")
    if len(shots_from.items) < num_shots:
        raise UsageError(f"{shots_from.path} has {len(shots_from.items)} examples, "
                         f"fewer than the {num_shots} few-shot examples asked for",
                         hint="lower eval.gsm8k.shots or point shots_from at a larger file")
    return dataset.items[:num_questions], shots_from.items[:num_shots]


@dataclass(frozen=True)
class Gsm8kPlan:
    """What the GSM8K eval asks and how it judges, settled before the first request: the
    datasets read and checked against their pins (`smoke_evals.plan_evals`); each default
    written here once."""

    dataset: Dataset  # the questions: its first `questions` lines
    shots_from: Dataset  # the few-shot examples: its first `shots` lines
    threshold: float  # the gate: the accuracy a pass needs
    questions: int = DEFAULT_QUESTIONS
    shots: int = DEFAULT_SHOTS
    score_thinking: bool = False  # score the thinking then `content`, not `content` alone
    max_tokens: int = DEFAULT_MAX_TOKENS
    parallel: int = 16  # requests in flight


async def run_gsm8k(
    client: TrafficClient,
    plan: Gsm8kPlan,
    *,
    model: str,
    api: Api,
    request_timeout_s: float,  # the caller's settings (smoke's), written there once
    overall_timeout_s: float,
    on_progress: Callable[[int, int], None] | None = None,  # (answered, questions)
) -> EvalResult:
    """Ask the plan's first questions greedily and score them against its gate."""
    threshold, parallel = plan.threshold, plan.parallel
    max_tokens, score_thinking = plan.max_tokens, plan.score_thinking
    check_threshold(threshold)
    if parallel < 1:
        raise UsageError(f"parallel must be at least 1, got {parallel}",
                         hint="ask with at least one request in flight")
    dataset, shots_from = plan.dataset, plan.shots_from
    questions, shots = select(dataset, shots_from, plan.questions, plan.shots)
    prefix = few_shot_prefix(shots)
    start = time.monotonic()
    deadline = start + overall_timeout_s
    gate = asyncio.Semaphore(parallel)
    answered: list[int] = []

    async def ask(index: int, item: Gsm8kItem) -> EvalItem:
        body = request_body(api, model, build_prompt(prefix, item), max_tokens=max_tokens,
                            stream=False, temperature=0.0)
        body["stop"] = list(STOP)
        async with gate:
            budget = min(request_timeout_s, deadline - time.monotonic())
            if budget <= 0:
                return EvalItem(index=index, line=item.line, label=item.label,
                                error=f"not sent: the eval's {overall_timeout_s:g}s ran out")
            result = await generate(client, api, body, timeout_s=budget)
        answered.append(index)
        if on_progress is not None:
            on_progress(len(answered), len(questions))
        return judge(index, item, result, score_thinking)

    items = await asyncio.gather(*(ask(i, item) for i, item in enumerate(questions)))
    correct = sum(item.correct for item in items)
    errors = sum(item.error is not None for item in items)
    invalid = sum(item.error is None and item.predicted is None for item in items)
    verdict = score(correct, invalid, errors, len(items), threshold)
    if score_thinking:
        verdict = verdict.model_copy(update={"verdict": verdict.verdict + "; thinking scored"})
    return EvalResult(
        dataset=str(dataset.path), dataset_sha256=dataset.sha256,
        shots_source=str(shots_from.path), shots_sha256=shots_from.sha256,
        num_shots=len(shots), max_tokens=max_tokens, stop=list(STOP), api=api,
        scored="thinking+content" if score_thinking else "content",
        duration_s=round(time.monotonic() - start, 3),
        score=verdict, items=list(items),
    )


def scored_text(result: RequestResult, score_thinking: bool) -> str:
    """The text whose last integer is the answer: `content`, or the thinking then `content`."""
    if score_thinking and result.reasoning:
        return result.reasoning + "\n" + result.text
    return result.text


def judge(index: int, item: Gsm8kItem, result: RequestResult,
          score_thinking: bool = False) -> EvalItem:
    """Score one response; an empty completion is an invalid answer, not a request error."""
    record = EvalItem(index=index, line=item.line, label=item.label, text=result.text,
                      reasoning=result.reasoning or None, finish_reason=result.finish_reason,
                      completion_tokens=result.output_tokens if result.token_source == "usage"
                      else None)
    if not result.ok and result.error_kind != "empty":
        record.error = f"{result.error_kind}: {result.error}"
        return record
    record.predicted = extract_answer(scored_text(result, score_thinking))
    record.correct = record.predicted == item.label
    return record
