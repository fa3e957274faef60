"""GSM8K: the pinned dataset loader, sglang's prompt format, and the eval against the simulator.

Every dataset here is synthetic, made by the test: arithmetic questions in GSM8K's JSONL shape
whose answers are known.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SimServer

from opsctl.core.errors import EXIT_USAGE
from opsctl.traffic.client import Api, make_client
from opsctl.traffic.evals.dataset import Dataset, DatasetError, load_gsm8k
from opsctl.traffic.evals.gsm8k import (
    EvalResult,
    Gsm8kPlan,
    build_prompt,
    few_shot_prefix,
    run_gsm8k,
)

StartSim = Callable[..., SimServer]
FAST = {"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"}


def synthetic(count: int, seed: int) -> list[dict[str, str]]:
    """Word problems with known answers, worded and annotated like GSM8K's."""
    rng = random.Random(seed)
    records = []
    for index in range(count):
        a, b = rng.randint(2, 90), rng.randint(2, 40)
        if index % 3 == 0:
            q = f"Mia picks {a} apples in the morning and {b} in the afternoon. How many apples?"
            work, value = f"Mia picks {a}+{b} = <<{a}+{b}={a + b}>>{a + b} apples.", a + b
        elif index % 3 == 1:
            q = f"A box holds {b} pens. How many pens are in {a} boxes? (case {index})"
            work, value = f"{a} boxes hold {a}*{b} = <<{a}*{b}={a * b}>>{a * b} pens.", a * b
        else:
            q = f"Leo had {a + b} marbles and lost {b}. How many are left? (case {index})"
            work, value = f"Leo has {a + b}-{b} = <<{a + b}-{b}={a}>>{a} left.", a
        records.append({"question": q, "answer": f"{work}\n#### {value}"})
    return records


def write_jsonl(path: Path, records: list[dict[str, str]], header: str = "") -> str:
    text = header + "".join(json.dumps(record) + "\n" for record in records)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def files(tmp_path: Path) -> tuple[Dataset, Dataset, Path]:
    test_path, train_path = tmp_path / "test.jsonl", tmp_path / "train.jsonl"
    test = load_gsm8k(test_path, write_jsonl(test_path, synthetic(40, seed=1)))
    train = load_gsm8k(train_path, write_jsonl(train_path, synthetic(8, seed=2)))
    return test, train, test_path


# --- the dataset -------------------------------------------------------------------------


def test_load_reads_questions_labels_and_skips_comments(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    records = synthetic(3, seed=0)
    records[1]["answer"] = "Sum it up: 1,000 + 234 = 1,234.\n#### 1,234"
    digest = write_jsonl(path, records, header="# comment line, skipped like sglang\n\n")
    dataset = load_gsm8k(path, digest.upper())  # hex case does not matter
    assert dataset.sha256 == digest
    assert [item.line for item in dataset.items] == [3, 4, 5]
    assert dataset.items[1].label == 1234
    assert dataset.items[0].question == records[0]["question"]


def test_sha256_mismatch_is_one_line_usage_error_with_both_hashes(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    digest = write_jsonl(path, synthetic(3, seed=0))
    other = hashlib.sha256(b"another file").hexdigest()
    with pytest.raises(DatasetError) as caught:
        load_gsm8k(path, other)
    message = caught.value.message
    assert digest in message and other in message and "\n" not in message
    assert caught.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json", "not JSON"),
        ('["a list"]', "not a JSON object"),
        ('{"question": "q?", "answer": "no final answer"}', '"answer" must be'),
        ('{"question": "", "answer": "#### 3"}', '"question" must be'),
        ('{"question": "q?", "answer": "#### none"}', "no integer answer"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, line: str, reason: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(synthetic(1, seed=0)[0]) + "\n" + line + "\n")
    with pytest.raises(DatasetError) as caught:
        load_gsm8k(path, hashlib.sha256(path.read_bytes()).hexdigest())
    assert f"{path}:2: " in caught.value.message and reason in caught.value.message


def test_bad_pin_and_missing_file_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not 64 hex digits"):
        load_gsm8k(tmp_path / "d.jsonl", "abc123")
    with pytest.raises(DatasetError, match="No such file"):
        load_gsm8k(tmp_path / "absent.jsonl", "0" * 64)


def test_prompt_is_sglang_few_shot_format(files: tuple[Dataset, Dataset, Path]) -> None:
    test, train, _ = files
    shot, asked = train.items[0], test.items[0]
    prompt = build_prompt(few_shot_prefix(train.items[:2]), asked)
    expected_first = f"Question: {shot.question}\nAnswer: {shot.answer}\n\n"
    assert prompt.startswith(expected_first)
    assert prompt.endswith(f"\n\nQuestion: {asked.question}\nAnswer:")
    assert prompt.count("Question: ") == 3


# --- the eval against the simulator in eval mode -----------------------------------------


def evaluate(url: str, test: Dataset, train: Dataset, threshold: float,
             api: Api = "completions", score_thinking: bool = False) -> EvalResult:
    async def go() -> EvalResult:
        async with make_client(url, None) as client:
            plan = Gsm8kPlan(dataset=test, shots_from=train, threshold=threshold, questions=40,
                             score_thinking=score_thinking)
            return await run_gsm8k(client, plan, model="/models/GLM-5-NVFP4", api=api,
                                   request_timeout_s=20, overall_timeout_s=60)
    return asyncio.run(go())


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_correct_key_passes_the_gate(sim_server: StartSim, files: tuple[Dataset, Dataset, Path],
                                     api: Api) -> None:
    test, train, key = files
    url = sim_server(env={**FAST, "OPSCTL_SIM_EVAL_KEY": str(key)}).url
    result = evaluate(url, test, train, threshold=0.9, api=api)
    assert result.score.passed, result.score.verdict
    assert (result.score.correct, result.score.total, result.score.accuracy) == (40, 40, 1.0)
    assert result.num_shots == 5 and result.stop == ["Question", "Assistant:", "<|separator|>"]
    assert all(item.text and item.text.rstrip().endswith(f"#### {item.label}")
               for item in result.items)


def test_wrong_share_fails_the_gate(sim_server: StartSim, files: tuple[Dataset, Dataset, Path]
                                    ) -> None:
    test, train, key = files
    env = {**FAST, "OPSCTL_SIM_EVAL_KEY": str(key), "OPSCTL_SIM_EVAL_WRONG_SHARE": "0.5",
           "OPSCTL_SIM_EVAL_SEED": "7"}
    result = evaluate(sim_server(env=env).url, test, train, threshold=0.8)
    assert not result.score.passed
    assert (result.score.correct, result.score.invalid, result.score.errors) == (20, 0, 0)
    assert result.score.ci95_high < 0.8
    wrong = [item for item in result.items if not item.correct]
    assert all(item.predicted == item.label + 1 for item in wrong)


def test_answers_without_numbers_count_as_invalid(
        sim_server: StartSim, files: tuple[Dataset, Dataset, Path], tmp_path: Path) -> None:
    test, train, _ = files
    key = tmp_path / "clueless.jsonl"
    key.write_text("".join(json.dumps({"question": item.question, "answer": "No idea."}) + "\n"
                           for item in test.items))
    result = evaluate(sim_server(env={**FAST, "OPSCTL_SIM_EVAL_KEY": str(key)}).url,
                      test, train, threshold=0.1)
    assert (result.score.correct, result.score.invalid, result.score.passed) == (0, 40, False)


def test_failed_requests_are_errors_and_fail_the_gate(
        sim_server: StartSim, files: tuple[Dataset, Dataset, Path]) -> None:
    test, train, key = files
    env = {**FAST, "OPSCTL_SIM_EVAL_KEY": str(key), "OPSCTL_SIM_FAULT": "error_rate",
           "OPSCTL_SIM_ERROR_RATE": "0.25"}
    result = evaluate(sim_server(env=env).url, test, train, threshold=0.5)
    assert (result.score.errors, result.score.correct) == (10, 30)
    assert not result.score.passed
    assert all("HTTP 500" in (item.error or "") for item in result.items if not item.correct)


# --- a reasoning model: only the answer (`content`) is scored, never the thinking -------------


def test_a_wrong_number_in_the_thinking_does_not_fail_a_right_answer(
        sim_server: StartSim, files: tuple[Dataset, Dataset, Path]) -> None:
    test, train, key = files
    env = {**FAST, "OPSCTL_SIM_EVAL_KEY": str(key), "OPSCTL_SIM_EVAL_REASONING": "decoy"}
    result = evaluate(sim_server(env=env).url, test, train, threshold=0.9, api="chat")
    assert result.scored == "content"
    assert (result.score.correct, result.score.total) == (40, 40), result.score.verdict
    # The thinking is kept as evidence: it ends on another number than the answer's.
    assert all(item.reasoning and not item.reasoning.rstrip().endswith(f"#### {item.label}")
               and item.text and item.text.rstrip().endswith(f"#### {item.label}")
               for item in result.items)


def test_a_right_number_in_the_thinking_does_not_pass_a_wrong_answer(
        sim_server: StartSim, files: tuple[Dataset, Dataset, Path]) -> None:
    test, train, key = files
    env = {**FAST, "OPSCTL_SIM_EVAL_KEY": str(key), "OPSCTL_SIM_EVAL_REASONING": "swap"}
    result = evaluate(sim_server(env=env).url, test, train, threshold=0.5, api="chat")
    assert result.score.correct == 0 and not result.score.passed
    assert all(item.reasoning and item.reasoning.rstrip().endswith(f"#### {item.label}")
               for item in result.items)


# --- the option that scores the thinking too: stated in the report, the answer still last ---


@pytest.mark.parametrize(("mode", "correct"), [("decoy", 40), ("swap", 0), ("trace", 40)])
def test_scoring_the_thinking_reads_it_before_the_answer(
        sim_server: StartSim, files: tuple[Dataset, Dataset, Path], mode: str, correct: int
) -> None:
    """decoy (wrong thinking, right answer) still passes and swap (right thinking, wrong answer)
    still fails: the answer's number comes last; trace (right thinking, an answer without a
    number) passes only with the thinking scored."""
    test, train, key = files
    env = {**FAST, "OPSCTL_SIM_EVAL_KEY": str(key), "OPSCTL_SIM_EVAL_REASONING": mode}
    result = evaluate(sim_server(env=env).url, test, train, threshold=0.9, api="chat",
                      score_thinking=True)
    assert result.scored == "thinking+content"
    assert "thinking scored" in result.score.verdict
    assert (result.score.correct, result.score.invalid) == (correct, 0), result.score.verdict
    assert all(item.reasoning for item in result.items)  # still kept apart as evidence


def test_an_answer_without_a_number_is_invalid_when_only_the_answer_is_scored(
        sim_server: StartSim, files: tuple[Dataset, Dataset, Path]) -> None:
    test, train, key = files
    env = {**FAST, "OPSCTL_SIM_EVAL_KEY": str(key), "OPSCTL_SIM_EVAL_REASONING": "trace"}
    result = evaluate(sim_server(env=env).url, test, train, threshold=0.5, api="chat")
    assert result.scored == "content"
    assert (result.score.correct, result.score.invalid) == (0, 40)
