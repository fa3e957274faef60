"""The profile's `eval:` section and how smoke plans its evals from it, before any request.

No server here: the schema, the shipped profiles, the synthetic simulator dataset and its pins,
and every way the plan refuses (exit 2) before a request is sent.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT

from opsctl.config.evalconfig import EvalConfig, resolve_path
from opsctl.config.profiles import load_profile
from opsctl.core.errors import EXIT_USAGE, ProfileError, UsageError
from opsctl.traffic.evals.dataset import Dataset, DatasetError, load_gsm8k
from opsctl.traffic.smoke_evals import EvalRequest, eval_request, plan_evals

SIM_TEST = REPO_ROOT / "deploy" / "evals" / "sim-gsm8k-test.jsonl"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _profile_with_eval(tmp_path: Path, section: dict[str, Any]) -> Path:
    data = yaml.safe_load((REPO_ROOT / "deploy" / "sim.yaml").read_text())
    data["eval"] = section
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _refuse(path: Path, pin: str) -> Dataset:
    raise AssertionError(f"no dataset should be read, got {path}")


# --- the schema and the shipped profiles ---------------------------------------------------


def test_sim_profile_pins_the_synthetic_files_it_ships() -> None:
    gsm8k = load_profile("sim").eval.gsm8k
    assert gsm8k is not None
    assert resolve_path(gsm8k.dataset) == SIM_TEST
    assert gsm8k.sha256 == sha256(SIM_TEST)
    assert gsm8k.shots_from is not None and gsm8k.shots_sha256 == sha256(resolve_path(
        gsm8k.shots_from))
    assert gsm8k.questions == len(load_gsm8k(SIM_TEST, gsm8k.sha256).items)


def test_glm_profile_scores_the_pinned_public_gsm8k_and_the_probe_sizes() -> None:
    config = load_profile("glm5-nvfp4-rtx6000").eval
    # On by default, on GSM8K's own test split (config/datasets.py pins it), no file to name:
    assert config.gsm8k is not None and config.gsm8k.dataset is None
    assert config.long_context.sizes == [4096, 16384, 65536]
    assert config.long_context.prefix_pair_tokens == 16384


def test_the_sim_dataset_is_regenerated_byte_for_byte() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_sim_gsm8k", REPO_ROOT / "scripts" / "make_sim_gsm8k.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    generated = module.generate()
    for name, text in generated.items():
        assert (REPO_ROOT / "deploy" / "evals" / name).read_text(encoding="utf-8") == text
    test_questions = {line for line in generated["sim-gsm8k-test.jsonl"].splitlines()[1:]}
    train_questions = {line for line in generated["sim-gsm8k-train.jsonl"].splitlines()[1:]}
    assert not test_questions & train_questions


@pytest.mark.parametrize(("section", "field"), [
    ({"gsm8k": {"dataset": "x.jsonl", "sha256": "ABC", "threshold": 0.9}}, "eval.gsm8k.sha256"),
    ({"gsm8k": {"dataset": "x.jsonl", "sha256": "0" * 64, "threshold": 0}}, "threshold"),
    ({"gsm8k": {"dataset": "x.jsonl", "sha256": "0" * 64, "threshold": 1.5}}, "threshold"),
    ({"gsm8k": {"dataset": "x.jsonl", "sha256": "0" * 64}}, "threshold"),
    ({"gsm8k": {"dataset": "x.jsonl", "sha256": "0" * 64, "threshold": 0.9,
                "shots_from": "t.jsonl"}}, "shots_sha256"),
    ({"long_context": {"sizes": [32]}}, "sizes"),
    ({"long_context": {"sizes": []}}, "sizes"),
    ({"gsm8k_extra": {}}, "gsm8k_extra"),
])
def test_bad_eval_sections_are_refused_naming_the_field(
    tmp_path: Path, section: dict[str, Any], field: str
) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(str(_profile_with_eval(tmp_path, section)))
    assert caught.value.exit_code == EXIT_USAGE
    assert field in caught.value.message


def test_threshold_one_and_null_prefix_pair_are_valid(tmp_path: Path) -> None:
    section = {"gsm8k": {"dataset": "/data/test.jsonl", "sha256": "a" * 64, "threshold": 1},
               "long_context": {"sizes": [4096], "prefix_pair_tokens": None}}
    config = load_profile(str(_profile_with_eval(tmp_path, section))).eval
    assert config.gsm8k is not None and config.gsm8k.threshold == 1.0
    assert resolve_path(config.gsm8k.dataset) == Path("/data/test.jsonl")
    assert config.long_context.prefix_pair_tokens is None


# --- planning ----------------------------------------------------------------------------


def test_nothing_asked_plans_nothing_and_reads_nothing() -> None:
    plan = plan_evals(EvalRequest(), load_profile("sim").eval, _refuse)
    assert plan.gsm8k is None and plan.long_context is None


def test_profile_plan_loads_both_files_and_keeps_its_settings() -> None:
    plan = plan_evals(eval_request("gsm8k", long_context=True), load_profile("sim").eval,
                      load_gsm8k)
    assert plan.gsm8k is not None and plan.long_context is not None
    assert plan.gsm8k.dataset.path == SIM_TEST
    assert plan.gsm8k.shots_from.path.name == "sim-gsm8k-train.jsonl"
    assert (plan.gsm8k.questions, plan.gsm8k.shots, plan.gsm8k.threshold) == (60, 5, 0.9)
    assert plan.long_context.sizes == (4096, 16384, 65536)


def test_command_line_overrides_the_profile() -> None:
    request = eval_request("gsm8k", questions=7, dataset=SIM_TEST, sha256=sha256(SIM_TEST),
                           threshold=0.5)
    plan = plan_evals(request, None, load_gsm8k)
    assert plan.gsm8k is not None
    assert (plan.gsm8k.questions, plan.gsm8k.threshold) == (7, 0.5)
    assert plan.gsm8k.shots_from is plan.gsm8k.dataset  # no shots file: sglang's own choice


def test_a_wrong_pin_is_exit_2_with_both_hashes() -> None:
    wrong = "0" * 64
    with pytest.raises(DatasetError) as caught:
        plan_evals(eval_request("gsm8k", dataset=SIM_TEST, sha256=wrong, threshold=0.9), None,
                   load_gsm8k)
    assert caught.value.exit_code == EXIT_USAGE
    assert sha256(SIM_TEST) in caught.value.message and wrong in caught.value.message


@pytest.mark.parametrize(("request_", "config", "says"), [
    (EvalRequest(questions=3), None, "apply to --eval gsm8k"),
    (EvalRequest(gsm8k=True, dataset=SIM_TEST), None, "go together"),
    (EvalRequest(gsm8k=True), EvalConfig(), "no eval.gsm8k section"),
    (EvalRequest(gsm8k=True, dataset=SIM_TEST, sha256="0" * 64), None, "threshold"),
])
def test_unplannable_requests_are_usage_errors_before_any_read(
    request_: EvalRequest, config: EvalConfig | None, says: str
) -> None:
    with pytest.raises(UsageError) as caught:
        plan_evals(request_, config, _refuse)
    assert says in caught.value.message and caught.value.hint


def test_more_questions_than_the_file_holds_is_refused() -> None:
    with pytest.raises(UsageError) as caught:
        plan_evals(eval_request("gsm8k", questions=61), load_profile("sim").eval, load_gsm8k)
    assert "61 questions asked" in caught.value.message and "holds 60" in caught.value.message


def test_unknown_eval_name_is_refused() -> None:
    with pytest.raises(UsageError) as caught:
        eval_request("mmlu")
    assert "gsm8k" in caught.value.hint


def test_more_shots_than_the_shots_file_holds_is_refused(tmp_path: Path) -> None:
    shots = REPO_ROOT / "deploy" / "evals" / "sim-gsm8k-train.jsonl"
    section = {
        "gsm8k": {
            "dataset": str(SIM_TEST),
            "sha256": sha256(SIM_TEST),
            "shots_from": str(shots),
            "shots_sha256": sha256(shots),
            "shots": 9,
            "questions": 60,
            "threshold": 0.9,
        }
    }
    config = load_profile(str(_profile_with_eval(tmp_path, section))).eval
    with pytest.raises(UsageError) as caught:
        plan_evals(eval_request("gsm8k"), config, load_gsm8k)
    assert "9 few-shot examples asked" in caught.value.message


def test_scoring_the_thinking_comes_from_the_profile_and_the_command_line_wins(
        tmp_path: Path) -> None:
    section = {"gsm8k": {"dataset": str(SIM_TEST), "sha256": sha256(SIM_TEST), "questions": 60,
                         "threshold": 0.9, "score_thinking": True}}
    config = load_profile(str(_profile_with_eval(tmp_path, section))).eval
    by_profile = plan_evals(eval_request("gsm8k"), config, load_gsm8k).gsm8k
    overridden = plan_evals(eval_request("gsm8k", score_thinking=False), config, load_gsm8k).gsm8k
    default = plan_evals(eval_request("gsm8k"), load_profile("sim").eval, load_gsm8k).gsm8k
    assert by_profile is not None and overridden is not None and default is not None
    assert (by_profile.score_thinking, overridden.score_thinking, default.score_thinking) == (
        True, False, False)
    with pytest.raises(UsageError, match="applies to --eval gsm8k"):
        plan_evals(EvalRequest(score_thinking=True), None, _refuse)


def test_a_profile_with_the_removed_lm_eval_key_is_one_line_usage(tmp_path: Path) -> None:
    """eval.lm_eval is gone: its profile says so and names what replaces it (exit 2)."""
    text = (REPO_ROOT / "deploy" / "sim.yaml").read_text()
    assert "\neval:\n" in text
    path = tmp_path / "old.yaml"
    path.write_text(text.replace("\neval:\n", "\neval:\n  lm_eval:\n    task: gsm8k\n", 1))
    with pytest.raises(ProfileError) as caught:
        load_profile(str(path))
    assert caught.value.exit_code == EXIT_USAGE and "\n" not in str(caught.value)
    assert "lm_eval was removed" in str(caught.value) and "--eval gsm8k" in str(caught.value)


def test_the_harness_eval_name_is_unknown() -> None:
    with pytest.raises(UsageError, match="unknown eval"):
        eval_request("lm-eval:gsm8k")
