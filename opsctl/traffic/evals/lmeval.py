"""`--eval lm-eval:TASK`: lm-evaluation-harness against the served model, offline, on pinned data.

lm-eval (the optional ``[lmeval]`` extra, pinned at ``LM_EVAL_VERSION``) runs as a subprocess of
this interpreter, ``python -m lm_eval run``, with the arguments opsctl resolves:

- model ``local-completions`` at ``<base>/v1/completions`` (``--api chat``:
  ``local-chat-completions`` at ``<base>/v1/chat/completions`` with ``--apply_chat_template``),
  the served name read from ``/v1/models``, ``tokenizer_backend=None,tokenized_requests=False``:
  prompts go as text and no tokenizer is fetched from the hub;
- a task file opsctl writes into a temporary directory (``--include_path``) whose data files are
  the pinned dataset's questions and few-shot examples, copied from what was read and checked
  against the sha256 pin (the copy's own sha256 is in the report); the harness's built-in task
  of the same name would download its data, so it is never used;
- offline: ``HF_DATASETS_OFFLINE``, ``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE`` set, the
  Hugging Face caches inside the temporary directory; the API key (if any) only in the child's
  ``OPENAI_API_KEY``, never on its command line or in the report;
- bounded: the whole run is killed (its process group) at the smoke's remaining time, and only
  the tail of its output is kept.

The gsm8k task file is sglang's few-shot GSM8K as ``gsm8k.py`` sends it (the same prompt, stop
strings, greedy, 512 new tokens, first-k few-shot examples) and its ``exact_match`` compares the
last integer of the output and of the reference after dropping commas (``regexes_to_ignore``),
extract.py's rule, so it scores what ``--eval gsm8k`` scores. The score, its Wilson interval and
the threshold are computed here from the per-question results lm-eval logs (``--log_samples``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel

from opsctl.core.errors import UsageError
from opsctl.core.redact import API_KEY_ENV
from opsctl.traffic.client import Api
from opsctl.traffic.evals.dataset import Dataset, Gsm8kItem
from opsctl.traffic.evals.extract import extract_answer
from opsctl.traffic.evals.gsm8k import DEFAULT_MAX_TOKENS, STOP
from opsctl.traffic.evals.score import Score, score

LM_EVAL_VERSION = "0.4.13"  # pyproject.toml's [lmeval] extra pins the same
INSTALL_HINT = f"pip install 'opsctl[lmeval]' (lm-eval[api]=={LM_EVAL_VERSION})"
TASK_PREFIX = "opsctl_"  # opsctl's task names, apart from the harness's built-in ones
LOG_TAIL_BYTES = 4096
MAX_SAMPLES_BYTES = 256 * 1024 * 1024
PARALLEL = 16  # requests in flight, as gsm8k.py's default
# lm-eval's exact_match deletes each pattern from output and reference, in order: commas, then
# what trails the last digit, then everything before the last run of digits: the last integer.
_LAST_INTEGER = (",", r"\D*$", r"(?s)^.*\D")


@dataclass(frozen=True)
class LmEvalPlan:
    """One task over pinned data: the first `questions` items, the first `shots` examples."""

    task: str
    dataset: Dataset
    shots_from: Dataset
    questions: int
    shots: int
    threshold: float


class LmEvalItem(BaseModel):
    index: int
    line: int
    label: int
    predicted: int | None = None  # the output's last integer, as extract.py reads it
    correct: bool = False  # lm-eval's exact_match
    text: str | None = None


class LmEvalResult(BaseModel):
    """The JSON record of one lm-eval run: what ran, its score against the gate, every output."""

    eval: Literal["lm-eval"] = "lm-eval"
    task: str
    lm_eval_version: str
    model: str  # lm-eval's model type
    model_args: str  # as passed (the API key is never among them)
    dataset: str
    dataset_sha256: str
    task_data_sha256: str  # of the copy lm-eval read (the pinned file's questions)
    shots_source: str
    shots_sha256: str
    num_shots: int
    max_tokens: int
    stop: list[str]
    api: Api
    metric: str
    harness_accuracy: float  # lm-eval's own aggregate, beside the one computed here
    duration_s: float
    score: Score
    items: list[LmEvalItem]


class LmEvalFailed(Exception):
    """lm-eval did not finish or left no results: one line, with the tail of its output."""


def installed_version() -> str:
    """The lm-eval this interpreter would run; UsageError (exit 2) when absent or another one."""
    if importlib.util.find_spec("lm_eval") is None:
        raise UsageError("--eval lm-eval:TASK needs lm-evaluation-harness, which is not "
                         "installed", hint=INSTALL_HINT)
    version = importlib.metadata.version("lm-eval")
    if version != LM_EVAL_VERSION:
        raise UsageError(f"lm-eval {version} is installed; opsctl's task files are written and "
                         f"checked for {LM_EVAL_VERSION}", hint=INSTALL_HINT)
    return version


def task_name(task: str) -> str:
    return TASK_PREFIX + task


def _jsonl(items: Sequence[Gsm8kItem]) -> bytes:
    return "".join(json.dumps({"question": i.question, "answer": i.answer}) + "\n"
                   for i in items).encode()


def task_yaml(task: str, test_file: Path, train_file: Path, shots: int) -> str:
    """The task file: JSON, which is YAML, so nothing needs quoting by hand."""
    config = {
        "task": task_name(task),
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(test_file), "train": str(train_file)}},
        "output_type": "generate_until",
        "test_split": "test",
        "fewshot_split": "train",
        "num_fewshot": shots,
        "fewshot_config": {"sampler": "first_n"},
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_target": "{{answer}}",
        "target_delimiter": " ",
        "fewshot_delimiter": "\n\n",
        "generation_kwargs": {"until": list(STOP), "do_sample": False, "temperature": 0.0,
                              "max_gen_toks": DEFAULT_MAX_TOKENS},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean",
                         "higher_is_better": True, "regexes_to_ignore": list(_LAST_INTEGER)}],
        "metadata": {"version": 1.0},
    }
    return json.dumps(config, indent=2) + "\n"


def model_of(api: Api, base_url: str, served: str, timeout_s: float) -> tuple[str, str]:
    """(lm-eval's model type, its model_args) for the served model at `base_url`."""
    kind, path = (("local-chat-completions", "/v1/chat/completions") if api == "chat"
                  else ("local-completions", "/v1/completions"))
    if "@" in urlsplit(base_url).netloc:
        raise UsageError("lm-eval: the base URL carries credentials, and lm-eval takes it on its "
                         "command line (visible to every user in `ps`)",
                         hint=f"drop user:password@ from the URL; a key goes in "
                         f"${API_KEY_ENV}, which lm-eval gets as OPENAI_API_KEY")
    if "," in served or "=" in served:
        raise UsageError(f"served model name {served!r} cannot be passed in lm-eval's "
                         "comma-separated model_args", hint="serve it under a plain name")
    args = (f"model={served},base_url={base_url.rstrip('/')}{path},tokenizer_backend=None,"
            f"tokenized_requests=False,num_concurrent={PARALLEL},max_retries=1,"
            f"timeout={max(1, int(timeout_s))}")
    return kind, args


@dataclass(frozen=True)
class Target:
    base_url: str
    model: str  # the served name, from /v1/models
    api: Api
    api_key: str | None
    request_timeout_s: float


async def run_lm_eval(plan: LmEvalPlan, target: Target, timeout_s: float,
                      python: str = sys.executable) -> LmEvalResult:
    """Run the task once, bounded by `timeout_s`; LmEvalFailed when it leaves no results."""
    version = installed_version()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="opsctl-lmeval-") as temp:
        root = Path(temp)
        questions = plan.dataset.items[:plan.questions]
        test_bytes = _jsonl(questions)
        (root / "test.jsonl").write_bytes(test_bytes)
        (root / "train.jsonl").write_bytes(_jsonl(plan.shots_from.items[:plan.shots]))
        (root / "tasks").mkdir()
        (root / "tasks" / f"{task_name(plan.task)}.yaml").write_text(
            task_yaml(plan.task, root / "test.jsonl", root / "train.jsonl", plan.shots))
        kind, model_args = model_of(target.api, target.base_url, target.model,
                                    target.request_timeout_s)
        argv = [python, "-m", "lm_eval", "run", "--model", kind, "--model_args", model_args,
                "--tasks", task_name(plan.task), "--include_path", str(root / "tasks"),
                "--output_path", str(root / "out"), "--log_samples", "--seed", "0"]
        if target.api == "chat":
            argv.append("--apply_chat_template")
        await _run(argv, root, _child_env(root, target.api_key), timeout_s)
        aggregate, samples = _read_results(root / "out", task_name(plan.task))
    items = [_item(sample, questions) for sample in samples]
    correct = sum(item.correct for item in items)
    invalid = sum(item.predicted is None for item in items)
    if len(items) != len(questions):
        raise LmEvalFailed(f"lm-eval scored {len(items)} of the {len(questions)} questions")
    return LmEvalResult(
        task=plan.task, lm_eval_version=version, model=kind, model_args=model_args,
        dataset=str(plan.dataset.path), dataset_sha256=plan.dataset.sha256,
        task_data_sha256=hashlib.sha256(test_bytes).hexdigest(),
        shots_source=str(plan.shots_from.path), shots_sha256=plan.shots_from.sha256,
        num_shots=plan.shots, max_tokens=DEFAULT_MAX_TOKENS, stop=list(STOP), api=target.api,
        metric="exact_match", harness_accuracy=aggregate,
        duration_s=round(time.monotonic() - start, 3),
        score=score(correct, invalid, 0, len(items), plan.threshold),
        items=sorted(items, key=lambda item: item.index),
    )


def _child_env(root: Path, api_key: str | None) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")}
    env = {**keep, "HF_HOME": str(root / "hf"), "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    if api_key:
        env["OPENAI_API_KEY"] = api_key
    return env


async def _run(argv: list[str], cwd: Path, env: Mapping[str, str], timeout_s: float) -> None:
    log = cwd / "lm-eval.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=dict(env), stdin=asyncio.subprocess.DEVNULL, stdout=out,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        try:
            code = await asyncio.wait_for(process.wait(), timeout=max(0.1, timeout_s))
        except TimeoutError:
            _kill(process.pid)
            await process.wait()
            raise LmEvalFailed(f"lm-eval did not finish within {timeout_s:.0f}s (killed)"
                               ) from None
        except BaseException:  # Ctrl-C or a cancelled smoke: nothing is left running
            _kill(process.pid)
            raise
    if code != 0:
        raise LmEvalFailed(f"lm-eval exited {code}: {last_line(log)}")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # its own session: all it started
        os.killpg(pid, signal.SIGKILL)


def last_line(log: Path) -> str:
    """The last non-empty line of the log's tail (an error, usually), at most 300 characters."""
    with log.open("rb") as handle:
        handle.seek(max(0, log.stat().st_size - LOG_TAIL_BYTES))
        tail = handle.read().decode("utf-8", "replace")
    lines = [line.strip() for line in tail.replace("\r", "\n").split("\n") if line.strip()]
    return (lines[-1] if lines else "no output")[:300]


def _read_results(out: Path, task: str) -> tuple[float, list[dict[str, Any]]]:
    results = sorted(out.glob("*/results_*.json"))
    samples = sorted(out.glob(f"*/samples_{task}_*.jsonl"))
    if not results or not samples:
        raise LmEvalFailed("lm-eval exited 0 but wrote no results or samples file")
    data = json.loads(results[-1].read_text(encoding="utf-8"))
    try:
        aggregate = float(data["results"][task]["exact_match,none"])
    except (KeyError, TypeError, ValueError):
        raise LmEvalFailed(f"lm-eval's results have no exact_match for {task}") from None
    if samples[-1].stat().st_size > MAX_SAMPLES_BYTES:
        raise LmEvalFailed(f"lm-eval's samples file is over {MAX_SAMPLES_BYTES} bytes")
    rows = [json.loads(line) for line in samples[-1].read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return aggregate, rows


def _item(sample: dict[str, Any], questions: Sequence[Gsm8kItem]) -> LmEvalItem:
    index = int(sample["doc_id"])
    if not 0 <= index < len(questions):
        raise LmEvalFailed(f"lm-eval scored doc_id {index}, not one of the questions asked")
    question = questions[index]
    responses = sample.get("filtered_resps") or [""]
    text = responses[0] if isinstance(responses[0], str) else str(responses[0])
    return LmEvalItem(index=index, line=question.line, label=question.label,
                      predicted=extract_answer(text), correct=float(sample["exact_match"]) == 1.0,
                      text=text)
