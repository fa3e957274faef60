"""The simulator's eval mode on its own: which prompts it answers, and how."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opsctl.sim.evalmode import (
    AnswerPlan,
    eval_plan,
    last_question,
    load_key,
    needle_answer,
    settings_from_env,
)
from opsctl.sim.generate import EOS_TOKEN_ID

PROMPT = ("Question: What is 2 + 2?\nAnswer: 2 + 2 = 4.\n#### 4\n\n"
          "Question: Ann has 3 cats and gets 5 more. How many cats?\nAnswer:")
NEEDLE = "The pass key is 48213. Remember it. 48213 is the pass key."


def key_file(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "key.jsonl"
    path.write_text("".join(
        json.dumps({"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}.\n#### {i + 1}"})
        + "\n" for i in range(count)))
    return path


def test_last_question_of_a_few_shot_prompt() -> None:
    assert last_question(PROMPT) == "Ann has 3 cats and gets 5 more. How many cats?"
    assert last_question(PROMPT + " 8") is None  # not waiting for an answer
    assert last_question("Tell me a story.") is None


def test_answer_key_answers_gsm8k_prompts_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "key.jsonl"
    path.write_text(json.dumps({"question": "Ann has 3 cats and gets 5 more. How many cats?",
                                "answer": "3 + 5 = 8 cats.\n#### 8"}) + "\n")
    env = {"OPSCTL_SIM_EVAL_KEY": str(path)}
    plan = eval_plan(PROMPT, 64, env)
    assert isinstance(plan, AnswerPlan)
    assert plan.text() == " 3 + 5 = 8 cats.\n#### 8"
    assert plan.finish_reason() == {"type": "stop", "matched": EOS_TOKEN_ID}
    chat = [{"role": "user", "content": PROMPT}]
    assert eval_plan(chat, 64, env) == AnswerPlan.of_text(chat, " 3 + 5 = 8 cats.\n#### 8", 64)
    assert eval_plan("Question: unknown?\nAnswer:", 64, env) is None
    assert eval_plan([1, 2, 3], 64, env) is None
    assert eval_plan(PROMPT, 64, {}) is None  # no key: GSM8K prompts are not recognised


def test_max_tokens_cuts_an_answer() -> None:
    plan = AnswerPlan.of_text("p", "one two three four", 2)
    assert (plan.total, plan.text(), plan.finish_reason()["type"]) == (2, "one two", "length")
    whole = AnswerPlan.of_text("p", "one two", 3)
    assert (whole.total, whole.token(2)) == (3, (EOS_TOKEN_ID, ""))


def test_wrong_share_is_exact_and_chosen_by_the_seed(tmp_path: Path) -> None:
    path = key_file(tmp_path, 40)
    stat = path.stat()

    def wrong(share: float, seed: int) -> set[str]:
        answers = load_key(str(path), stat.st_mtime_ns, stat.st_size, share, seed).answers
        return {q for q, a in answers.items() if not a.endswith(f"#### {int(q.split()[2]) + 1}")}

    assert len(wrong(0.25, 1)) == 10 and len(wrong(0.26, 1)) == 10  # floor(40 x share)
    assert wrong(0.25, 1) == wrong(0.25, 1)
    assert wrong(0.25, 1) != wrong(0.25, 2)
    assert wrong(0.0, 1) == set() and len(wrong(1.0, 1)) == 40
    answers = load_key(str(path), stat.st_mtime_ns, stat.st_size, 1.0, 1).answers
    assert answers["What is 7 + 1?"].endswith("#### 9")  # the final number, one larger


def test_needle_found_or_missed_by_depth() -> None:
    filler = "Words fill the page. " * 100  # 400 tokens by the simulator's count
    shallow = NEEDLE + " " + filler + "What is the pass key? The pass key is"
    deep = filler + NEEDLE + " What is the pass key? The pass key is"
    assert needle_answer(shallow, None) == " 48213."
    assert needle_answer(deep, None) == " 48213."
    assert needle_answer(shallow, 300) == " 48213."
    missed = needle_answer(deep, 300)
    assert missed is not None and missed != " 48213." and len(missed) == len(" 48213.")
    assert needle_answer(filler + "What is the pass key?", None) is None  # no needle
    assert needle_answer(NEEDLE + filler, None) is None  # not asked


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OPSCTL_SIM_EVAL_WRONG_SHARE": "1.5"}, "OPSCTL_SIM_EVAL_WRONG_SHARE must be in"),
        ({"OPSCTL_SIM_EVAL_SEED": "x"}, "OPSCTL_SIM_EVAL_SEED must be a number"),
        ({"OPSCTL_SIM_NEEDLE_MAX_TOKENS": "lots"}, "OPSCTL_SIM_NEEDLE_MAX_TOKENS must be"),
        ({"OPSCTL_SIM_EVAL_KEY": "/nonexistent/key.jsonl"}, "No such file"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings_from_env(env)


def test_malformed_key_line_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "key.jsonl"
    path.write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match="line 1"):
        settings_from_env({"OPSCTL_SIM_EVAL_KEY": str(path)})
