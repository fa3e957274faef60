"""`--eval lm-eval:gsm8k`: lm-evaluation-harness 0.4.13 (the [lmeval] extra) run offline against
the simulator, on the `sim` profile's pinned synthetic GSM8K file.

The harness is the real one, as a subprocess; the simulator's eval mode answers the pinned file
wrong on purpose on a share of it, so the harness's verdict can be compared item by item with
opsctl's own GSM8K gate on the same server.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT, SimServer

from opsctl.config.profiles import load_profile
from opsctl.core.errors import EXIT_USAGE, UsageError
from opsctl.traffic import app
from opsctl.traffic.client import make_client
from opsctl.traffic.evals import lmeval
from opsctl.traffic.evals.dataset import load_gsm8k
from opsctl.traffic.evals.gsm8k import Gsm8kSettings, run_gsm8k
from opsctl.traffic.evals.lmeval import LmEvalFailed, LmEvalPlan, Target, run_lm_eval
from opsctl.traffic.settings import SmokeSettings
from opsctl.traffic.smoke_evals import EvalRequest, eval_request, plan_evals

StartSim = Callable[..., SimServer]
FAST = {"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"}
SIM_TEST = REPO_ROOT / "deploy" / "evals" / "sim-gsm8k-test.jsonl"
WRONG = {"OPSCTL_SIM_EVAL_KEY": str(SIM_TEST), "OPSCTL_SIM_EVAL_WRONG_SHARE": "0.25",
         "OPSCTL_SIM_EVAL_SEED": "3"}
SERVED = "glm-5"
LM_EVAL_TIMEOUT_S = 400.0  # the harness's imports take most of it on a loaded 2-core machine

needs_lm_eval = pytest.mark.skipif(
    lmeval.importlib.util.find_spec("lm_eval") is None,
    reason="lm-eval is not installed (scripts/setup.sh installs the [lmeval] extra)")


def sim(start: StartSim, **env: str) -> str:
    return start(env={**FAST, **env}, args=["--served-model-name", SERVED]).url


def profile_plan(questions: int = 24) -> LmEvalPlan:
    plan = plan_evals(eval_request("lm-eval:gsm8k", questions=questions),
                      load_profile("sim").eval, load_gsm8k).lm_eval
    assert plan is not None
    return plan


@needs_lm_eval
def test_the_harness_scores_exactly_what_opsctls_gate_scores(sim_server: StartSim) -> None:
    url = sim(sim_server, **WRONG)
    plan = profile_plan()

    async def both() -> tuple[Any, Any]:
        async with make_client(url, None) as client:
            ours = await run_gsm8k(client, model=SERVED, dataset=plan.dataset,
                                   shots_from=plan.shots_from, settings=Gsm8kSettings(
                                       threshold=plan.threshold, num_questions=plan.questions,
                                       num_shots=plan.shots))
        theirs = await run_lm_eval(plan, Target(url, SERVED, "completions", None, 30.0),
                                   LM_EVAL_TIMEOUT_S)
        return ours, theirs

    ours, theirs = asyncio.run(both())
    assert 0 < ours.score.correct < ours.score.total == 24  # the simulator got some wrong
    assert [i.correct for i in theirs.items] == [i.correct for i in ours.items]
    assert [i.predicted for i in theirs.items] == [i.predicted for i in ours.items]
    assert theirs.score == ours.score
    assert theirs.harness_accuracy == pytest.approx(ours.score.accuracy)
    assert theirs.lm_eval_version == "0.4.13" and theirs.model == "local-completions"
    assert "tokenizer_backend=None" in theirs.model_args and f"model={SERVED}," in theirs.model_args
    assert theirs.dataset_sha256 == plan.dataset.sha256 and theirs.num_shots == 5


@needs_lm_eval
def test_the_chat_endpoint_with_a_key_scores_what_opsctls_chat_gate_scores(
        sim_server: StartSim) -> None:
    """`--api chat`: local-chat-completions with the chat template applied server-side; the
    key reaches the harness only through its environment, and the server enforces it."""
    url = sim_server(env={**FAST, **WRONG},
                     args=["--served-model-name", SERVED, "--api-key", "sk-gate-key"]).url
    plan = profile_plan(questions=12)

    async def both() -> tuple[Any, Any]:
        async with make_client(url, "sk-gate-key") as client:
            ours = await run_gsm8k(client, model=SERVED, dataset=plan.dataset,
                                   shots_from=plan.shots_from, settings=Gsm8kSettings(
                                       threshold=plan.threshold, num_questions=plan.questions,
                                       num_shots=plan.shots, api="chat"))
        theirs = await run_lm_eval(plan, Target(url, SERVED, "chat", "sk-gate-key", 30.0),
                                   LM_EVAL_TIMEOUT_S)
        return ours, theirs

    ours, theirs = asyncio.run(both())
    assert theirs.model == "local-chat-completions" and theirs.api == "chat"
    assert ours.score.errors == 0 and 0 < ours.score.correct < 12
    assert [i.correct for i in theirs.items] == [i.correct for i in ours.items]
    assert "sk-gate-key" not in theirs.model_dump_json()


@needs_lm_eval
def test_smoke_runs_it_through_the_profile_and_gates_on_its_threshold(
        sim_server: StartSim, tmp_path: Path) -> None:
    """The sim profile's 60 questions and threshold (0.9) fail a server a quarter wrong (exactly
    15 of 60): exit 5, one line."""
    url = sim(sim_server, **WRONG)
    options = replace(
        app.smoke_target("sim", None, url, lambda name: pytest.fail("no locator")),
        api_key="sk-secret-key", report_path=tmp_path / "smoke.json",
        settings=SmokeSettings(request_timeout_s=30, overall_timeout_s=LM_EVAL_TIMEOUT_S + 60))
    result = app.smoke(options, eval_request("lm-eval:gsm8k"),
                       push=lambda *args: pytest.fail("no push"), client_factory=make_client,
                       load_dataset=load_gsm8k)
    check = result.report.check("lm_eval")
    assert check is not None and check.status == "fail", result.report.checks
    assert result.error is not None and result.error.exit_code == 5
    assert "lm_eval (gsm8k: accuracy" in result.error.message and "< threshold 0.9" in \
        result.error.message
    written = json.loads(result.path.read_text())
    assert written["lm_eval"]["score"]["threshold"] == 0.9
    assert (written["lm_eval"]["score"]["correct"], written["lm_eval"]["score"]["total"]) == (
        45, 60)
    assert "sk-secret-key" not in result.path.read_text()


@needs_lm_eval
def test_a_run_past_its_time_is_killed_and_is_a_failed_check(
        sim_server: StartSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = sim(sim_server, **WRONG)
    started: list[int] = []
    real = asyncio.create_subprocess_exec

    async def recording(*args: Any, **kwargs: Any) -> Any:
        process = await real(*args, **kwargs)
        started.append(process.pid)
        return process

    monkeypatch.setattr(lmeval.asyncio, "create_subprocess_exec", recording)
    with pytest.raises(LmEvalFailed, match=r"did not finish within 2s \(killed\)"):
        asyncio.run(run_lm_eval(profile_plan(), Target(url, SERVED, "completions", None, 30.0),
                                2.0))
    assert len(started) == 1
    with pytest.raises(ProcessLookupError):  # the whole group is gone
        os.killpg(started[0], 0)


def test_without_the_harness_one_line_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lmeval.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UsageError) as caught:
        plan_evals(eval_request("lm-eval:gsm8k"), load_profile("sim").eval, load_gsm8k)
    assert caught.value.exit_code == EXIT_USAGE and "\n" not in caught.value.message
    assert "pip install 'opsctl[lmeval]'" in (caught.value.hint or "")


def test_unknown_harness_tasks_are_refused_before_anything_runs() -> None:
    with pytest.raises(UsageError) as caught:
        eval_request("lm-eval:mmlu")
    assert "lm-eval:gsm8k" in (caught.value.hint or "")
    with pytest.raises(UsageError, match="apply to --eval gsm8k and lm-eval"):
        plan_evals(EvalRequest(questions=3), None, load_gsm8k)


def test_the_task_file_reads_the_copied_pinned_data(tmp_path: Path) -> None:
    plan = profile_plan(questions=3)
    text = lmeval.task_yaml("gsm8k", tmp_path / "t.jsonl", tmp_path / "s.jsonl", plan.shots)
    task = json.loads(text)  # JSON is YAML: what the harness reads
    assert task["task"] == "opsctl_gsm8k" and task["dataset_path"] == "json"
    assert task["dataset_kwargs"]["data_files"] == {"test": str(tmp_path / "t.jsonl"),
                                                    "train": str(tmp_path / "s.jsonl")}
    assert task["generation_kwargs"]["until"] == ["Question", "Assistant:", "<|separator|>"]
    assert task["num_fewshot"] == 5 and task["fewshot_config"] == {"sampler": "first_n"}
