"""`opsctl smoke --eval gsm8k / --long-context / --compare-with` against the simulator over HTTP.

The simulator's eval mode answers the synthetic GSM8K file the `sim` profile pins (its answer key
is the same file), wrong on purpose on a chosen share of it, and misses pass keys placed beyond a
chosen depth: the gate's both sides, through the traffic app and through the CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPO_ROOT, SimServer
from rich.console import Console

from opsctl.core.errors import EXIT_SMOKE, EXIT_USAGE
from opsctl.traffic import app, view
from opsctl.traffic.client import make_client
from opsctl.traffic.evals.dataset import DatasetError, load_gsm8k
from opsctl.traffic.settings import SmokeSettings
from opsctl.traffic.smoke import SmokeOptions, run_smoke
from opsctl.traffic.smoke_evals import EvalRequest, eval_request
from opsctl.traffic.smoke_report import SmokeReport, checkpoint_warning

StartSim = Callable[..., SimServer]
FAST = {"OPSCTL_SIM_TTFT_MS": "2", "OPSCTL_SIM_ITL_MS": "1"}
SIM_TEST = REPO_ROOT / "deploy" / "evals" / "sim-gsm8k-test.jsonl"
KEY = {"OPSCTL_SIM_EVAL_KEY": str(SIM_TEST)}


def sim(start: StartSim, **env: str) -> str:
    return start(env={**FAST, **env}, args=["--served-model-name", "glm-5",
                                            "--enable-metrics"]).url


def _no_locator(profile_name: str) -> app.LocatedServer:
    raise AssertionError("--base-url needs no locator")


def _no_push(kind: str, report: dict[str, Any], gateway: str) -> None:
    raise AssertionError("no gateway: nothing to push")


def smoke(url: str, tmp_path: Path, evals: EvalRequest, compare_with: Path | None = None,
          name: str = "smoke.json", **factory: Any) -> app.SmokeResult:
    options = replace(app.smoke_target("sim", None, url, _no_locator), report_path=tmp_path / name,
                      compare_with=compare_with,
                      settings=SmokeSettings(request_timeout_s=30, overall_timeout_s=120))
    return app.smoke(options, evals, push=_no_push,
                     client_factory=factory.get("client_factory", make_client),
                     load_dataset=load_gsm8k)


def status(report: SmokeReport, name: str) -> str:
    check = report.check(name)
    assert check is not None, name
    return check.status


# --- GSM8K accuracy ----------------------------------------------------------------------------


def test_right_answers_pass_the_gate(sim_server: StartSim, tmp_path: Path) -> None:
    result = smoke(sim(sim_server, **KEY), tmp_path, eval_request("gsm8k"))
    assert result.error is None, result.report.checks
    gsm8k = result.report.gsm8k
    assert gsm8k is not None and status(result.report, "gsm8k") == "pass"
    assert (gsm8k.score.correct, gsm8k.score.total, gsm8k.score.accuracy) == (60, 60, 1.0)
    assert gsm8k.score.ci95_low < 1.0 == gsm8k.score.ci95_high
    assert gsm8k.num_shots == 5 and gsm8k.shots_source.endswith("sim-gsm8k-train.jsonl")
    written = json.loads(result.path.read_text())
    assert written["gsm8k"]["score"]["passed"] is True and written["long_context"] is None


def test_wrong_answers_fail_with_exit_5_and_diverge_from_the_reference(
    sim_server: StartSim, tmp_path: Path
) -> None:
    reference = smoke(sim(sim_server, **KEY), tmp_path, eval_request("gsm8k"), name="ref.json")
    wrong = sim(sim_server, **KEY, OPSCTL_SIM_EVAL_WRONG_SHARE="0.25")
    result = smoke(wrong, tmp_path, eval_request("gsm8k"), compare_with=reference.path)
    report = result.report
    assert report.gsm8k is not None and report.gsm8k.score.correct == 45  # floor(60 x 0.25) wrong
    assert status(report, "gsm8k") == "fail" and status(report, "compare") == "pass"
    error = result.error
    assert error is not None and error.exit_code == EXIT_SMOKE
    assert "gsm8k (accuracy 0.750 (45/60, 95% CI 0.628-0.842) < threshold 0.9)" in error.message
    assert "\n" not in error.message and "baseline variant" in error.hint
    # The GSM8K outputs diverge from the reference's at a final answer (no verdict from it).
    divergence = report.gsm8k_divergence
    assert divergence is not None and divergence.unit == "characters"
    first_wrong = next(item for item in report.gsm8k.items if not item.correct)
    assert divergence.request_index == first_wrong.index
    assert "####" in divergence.reference_excerpt and "####" in divergence.current_excerpt


def test_a_dataset_that_is_not_the_pinned_one_is_exit_2_before_any_request(
    tmp_path: Path
) -> None:
    def no_client(*args: object, **kwargs: object) -> httpx.AsyncClient:
        raise AssertionError("no request may be sent")

    other = tmp_path / "test.jsonl"
    other.write_bytes(SIM_TEST.read_bytes().replace(b"#### 30", b"#### 31", 1))
    pin = hashlib.sha256(SIM_TEST.read_bytes()).hexdigest()
    with pytest.raises(DatasetError) as caught:
        smoke("http://127.0.0.1:9", tmp_path, eval_request(
            "gsm8k", dataset=other, sha256=pin, threshold=0.9), client_factory=no_client)
    assert caught.value.exit_code == EXIT_USAGE
    actual = hashlib.sha256(other.read_bytes()).hexdigest()
    assert actual in caught.value.message and pin in caught.value.message
    assert not (tmp_path / "smoke.json").exists()


# --- long-context probes -----------------------------------------------------------------------


def test_probes_pass_on_a_healthy_server(sim_server: StartSim, tmp_path: Path) -> None:
    result = smoke(sim(sim_server), tmp_path, eval_request(None, long_context=True))
    assert result.error is None, result.report.checks
    probes = result.report.long_context
    assert probes is not None
    assert [p.name for p in probes] == ["needle-4k", "needle-16k", "needle-64k",
                                        "prefix-pair-16k"]
    assert all(p.passed for p in probes) and status(result.report, "long_context") == "pass"
    assert result.report.check("gsm8k") is None  # not asked for: no row at all


def test_a_needle_missed_at_16k_fails_with_exit_5(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server, OPSCTL_SIM_NEEDLE_MAX_TOKENS="8000")
    result = smoke(url, tmp_path, eval_request(None, long_context=True))
    probes = {p.name: p for p in result.report.long_context or []}
    assert probes["needle-4k"].passed and probes["prefix-pair-16k"].passed
    assert not probes["needle-16k"].passed and not probes["needle-64k"].passed
    assert probes["needle-16k"].got != probes["needle-16k"].expected
    error = result.error
    assert error is not None and error.exit_code == EXIT_SMOKE
    assert "long_context (needle-16k, needle-64k failed)" in error.message


def test_each_eval_has_a_budget_of_its_own_after_the_checks(
        sim_server: StartSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GSM8K and the probes run with eval_timeout_s each (they used to share what the checks
    left of the smoke's 600 s), and the report records it."""
    from opsctl.traffic import smoke as smoke_module

    given: dict[str, float] = {}
    real_gsm8k, real_probes = smoke_module.gsm8k_check, smoke_module.long_context_check

    async def gsm8k(*args: Any, **kwargs: Any) -> Any:
        given["gsm8k"] = kwargs["remaining_s"]
        return await real_gsm8k(*args, **kwargs)

    async def probes(*args: Any, **kwargs: Any) -> Any:
        given["long_context"] = kwargs["remaining_s"]
        return await real_probes(*args, **kwargs)

    monkeypatch.setattr(smoke_module, "gsm8k_check", gsm8k)
    monkeypatch.setattr(smoke_module, "long_context_check", probes)
    options = replace(
        app.smoke_target("sim", None, sim(sim_server, **KEY), _no_locator),
        report_path=tmp_path / "smoke.json",
        settings=SmokeSettings(request_timeout_s=30, overall_timeout_s=60, eval_timeout_s=300))
    report = app.smoke(options, eval_request("gsm8k", long_context=True), push=_no_push,
                       client_factory=make_client, load_dataset=load_gsm8k).report
    assert given == {"gsm8k": 300, "long_context": 300}
    assert status(report, "gsm8k") == status(report, "long_context") == "pass", report.checks
    assert report.settings is not None and report.settings.eval_timeout_s == 300


def test_an_eval_runs_when_the_checks_budget_is_spent() -> None:
    import asyncio

    from opsctl.traffic.smoke import _Run

    run = _Run(SmokeOptions(base_url="http://127.0.0.1:9",
                            settings=SmokeSettings.model_construct(overall_timeout_s=0.0)))
    ran: list[str] = []

    async def body(name: str) -> tuple[Any, str]:
        ran.append(name)
        return "pass", "ran"

    async def both() -> None:
        await run.stage("generations", lambda: body("generations"))
        await run.stage("gsm8k", lambda: body("gsm8k"), own_budget=True)

    asyncio.run(both())
    assert ran == ["gsm8k"]
    assert [(c.name, c.status) for c in run.checks] == [("generations", "fail"), ("gsm8k", "pass")]


def test_view_shows_accuracy_with_its_interval_and_the_probes(
    sim_server: StartSim, tmp_path: Path
) -> None:
    result = smoke(sim(sim_server, **KEY), tmp_path, eval_request("gsm8k", long_context=True))
    console = Console(record=True, width=200)
    view.show_smoke(result, console)
    text = console.export_text()
    assert "GSM8K: accuracy 1.000 (60/60), 95% CI 0.940-1.000, threshold 0.9" in text
    assert "long-context probes" in text and "needle-64k" in text and "prefix-pair-16k" in text


# --- --compare-with: where two runs diverge, and which checkpoint they ran ------------------


def _recorded(sim_url: str, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    report = run_smoke(SmokeOptions(base_url=sim_url,
                                    settings=SmokeSettings(request_timeout_s=10.0)))
    data = report.model_dump(mode="json")
    edit(data)
    path = tmp_path / "reference.json"
    path.write_text(json.dumps(data))
    return path


def test_compare_names_the_first_differing_request_and_offset(
    sim_server: StartSim, tmp_path: Path
) -> None:
    url = sim(sim_server)

    def change_capital(data: dict[str, Any]) -> None:
        capital = data["generations"][1]
        capital["text"] = capital["text"][:5] + "#" + capital["text"][6:]

    reference = _recorded(url, tmp_path, change_capital)
    result = smoke(url, tmp_path, EvalRequest(), compare_with=reference)
    divergence = result.report.divergence
    assert divergence is not None
    assert (divergence.request_index, divergence.request_id, divergence.unit,
            divergence.offset) == (1, "capital", "characters", 5)
    check = result.report.check("compare")
    assert check is not None and check.status == "fail"
    assert "in 1 of 3 prompts; first: request 1 (capital)" in check.detail
    assert result.error is not None and result.error.exit_code == EXIT_SMOKE
    assert "compare (first divergence: request 1 (capital) at characters 5)" in \
        result.error.message
    assert json.loads(result.path.read_text())["divergence"]["offset"] == 5


def test_old_reports_without_the_new_fields_still_compare(
    sim_server: StartSim, tmp_path: Path
) -> None:
    url = sim(sim_server)
    added = ("divergence", "gsm8k", "gsm8k_divergence", "long_context", "checkpoint", "warnings")
    reference = _recorded(url, tmp_path, lambda data: [data.pop(key) for key in added])
    result = smoke(url, tmp_path, EvalRequest(), compare_with=reference)
    assert result.error is None and status(result.report, "compare") == "pass"


def test_different_checkpoints_warn_but_do_not_fail(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server)
    reference = _recorded(url, tmp_path, lambda data: data.update(checkpoint={"id": "ckpt-a"}))
    report = run_smoke(SmokeOptions(base_url=url, compare_with=reference,
                                    checkpoint={"id": "ckpt-b", "revision": "x"}))
    assert report.passed and report.check("compare") is not None
    assert report.warnings == [checkpoint_warning({"id": "ckpt-b"}, {"id": "ckpt-a"})]
    assert "'ckpt-b' differs from the reference's 'ckpt-a'" in report.warnings[0]
    same = run_smoke(SmokeOptions(base_url=url, compare_with=reference,
                                  checkpoint={"id": "ckpt-a"}))
    assert same.warnings == []


@pytest.mark.parametrize(("ours", "theirs"), [
    (None, {"id": "a"}), ({"id": "a"}, None), ({"revision": "1"}, {"id": "a"}),
    ({"id": "a", "revision": "1"}, {"id": "a", "revision": "2"}),
])
def test_checkpoints_are_compared_only_by_id_when_both_have_one(
    ours: dict[str, str] | None, theirs: dict[str, str] | None
) -> None:
    assert checkpoint_warning(ours, theirs) is None


# --- the CLI end to end ------------------------------------------------------------------------


def opsctl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPSCTL_API_KEY",
                                                            "OPSCTL_PUSHGATEWAY")}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "opsctl", *args], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)


def test_cli_eval_with_a_dataset_on_the_command_line(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server, **KEY)
    pin = hashlib.sha256(SIM_TEST.read_bytes()).hexdigest()
    out = tmp_path / "smoke.json"
    done = opsctl("smoke", "--base-url", url, "--eval", "gsm8k", "--eval-dataset",
                  str(SIM_TEST), "--eval-sha256", pin, "--eval-threshold", "0.9",
                  "--eval-questions", "20", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GSM8K: accuracy 1.000 (20/20)" in done.stdout
    written = json.loads(out.read_text())
    assert written["gsm8k"]["score"]["total"] == 20 and written["gsm8k"]["dataset_sha256"] == pin


def test_cli_gate_failures_exit_5_in_one_line(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server, **KEY, OPSCTL_SIM_EVAL_WRONG_SHARE="0.25",
              OPSCTL_SIM_NEEDLE_MAX_TOKENS="8000")
    done = opsctl("smoke", "--profile", "sim", "--base-url", url, "--eval", "gsm8k",
                  "--long-context", "--json", str(tmp_path / "smoke.json"))
    assert done.returncode == 5, done.stdout + done.stderr
    error = next(line for line in done.stderr.splitlines() if line.startswith("error:"))
    assert "accuracy 0.750 (45/60, 95% CI 0.628-0.842) < threshold 0.9" in error
    assert "needle-16k" in error and "Traceback" not in done.stderr


def test_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    wrong_pin = "0" * 64
    done = opsctl("smoke", "--base-url", "http://127.0.0.1:9", "--eval", "gsm8k",
                  "--eval-dataset", str(SIM_TEST), "--eval-sha256", wrong_pin,
                  "--eval-threshold", "0.9", "--json", str(tmp_path / "smoke.json"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert wrong_pin in done.stderr
    assert hashlib.sha256(SIM_TEST.read_bytes()).hexdigest() in done.stderr
    orphan = opsctl("smoke", "--base-url", "http://127.0.0.1:9", "--eval-questions", "5")
    assert orphan.returncode == 2 and "--eval gsm8k" in orphan.stderr
