"""`up --gate` against FakeEngine, FakeSglang, a fake verify and a fake smoke: every path.

A pass records the last good variant; a failed verify, smoke check, compare or eval removes the
variant, brings the last good back and ends in exit 5; without a last good nothing comes back;
Ctrl-C removes what the run started, brings the last good back and stays a KeyboardInterrupt
(or, from smoke's partial report, Interrupted: exit 130, never a pass).
tests/integration/test_gate.py runs the same contract on the real engine with the simulator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest
from fakes import Behaviour, FakeClock, FakeEngine, FakeSglang

from opsctl.config.profiles import Deployment, load_profile
from opsctl.core import labels
from opsctl.core.errors import (
    EXIT_INTERRUPTED,
    EXIT_LAUNCH,
    EXIT_SMOKE,
    Interrupted,
    LaunchError,
    UsageError,
)
from opsctl.deploy.launch import Launch
from opsctl.deploy.state import LastGood, StateDir
from opsctl.gate import gate as gating
from opsctl.gate.gate import GateFailed
from opsctl.observe.metrics import GATE_OUTCOMES, gate_families
from opsctl.traffic.app import Traffic
from opsctl.traffic.evals.dataset import Dataset, load_gsm8k
from opsctl.traffic.smoke import SmokeOptions
from opsctl.traffic.smoke_evals import EvalPlan
from opsctl.traffic.smoke_report import CheckResult, SmokeReport, write_report
from opsctl.verify.app import VerifyResult
from opsctl.verify.checks import FieldCheck

PROFILE = load_profile("sim")
IMAGE = "opsctl/sim:test"
SERVED = PROFILE.model.served_name


class FakeSmoke:
    """Sends smoke's checks (Traffic.send_smoke): a report per variant, `failing[variant]`
    names its failed checks; `refuse`: the eval datasets' loader raises it. `asks`: the plans
    smoke was given."""

    def __init__(self, failing: dict[str, dict[str, str]] | None = None,
                 interrupt: str | None = None, refuse: Exception | None = None,
                 partial: str | None = None) -> None:
        self.failing = failing or {}
        self.interrupt = interrupt
        self.refuse = refuse
        # As the real smoke does on Ctrl-C: it catches it and returns a partial report.
        self.partial = partial
        self.asks: list[SmokeOptions] = []
        self.pushed: list[tuple[str, str]] = []  # smoke reports pushed: (kind, gateway)

    def load(self, path: Path, sha256: str) -> Dataset:
        if self.refuse is not None:
            raise self.refuse
        return load_gsm8k(path, sha256)

    def traffic(self) -> Traffic:
        """The traffic room as the gate calls it, with this fake sending smoke's checks."""
        return Traffic(api_key=None, client_factory=_no_client,
                       push=lambda kind, record, url: self.pushed.append((kind, url)),
                       load_dataset=self.load, plot=_no_client, send_smoke=self)

    def __call__(self, ask: SmokeOptions, client_factory: object) -> SmokeReport:
        self.asks.append(ask)
        if ask.variant == self.interrupt:
            raise KeyboardInterrupt
        failed = self.failing.get(ask.variant or "", {})
        checks = [CheckResult(name="generations", status="pass", duration_s=0.0, detail="3 ok")]
        checks += [CheckResult(name=name, status="fail", duration_s=0.0, detail=detail)
                   for name, detail in failed.items()]
        report = SmokeReport(started_at="2026-11-29T11:00:00+00:00", duration_s=1.0,
                             base_url=ask.base_url, profile=PROFILE.name,
                             variant=ask.variant, checks=checks, passed=not failed)
        if ask.variant == self.partial:
            report.passed = False
            report.record_stop(KeyboardInterrupt())
        return report


def _no_client(*args: object, **kwargs: object) -> Any:
    raise AssertionError("the fakes send nothing")

@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Removed servers' logs go to out/logs/ under the working directory: a temporary one here."""
    monkeypatch.chdir(tmp_path)



class FakeVerify:
    """Every variant resolves what its profile says, except those in `mismatching`."""

    def __init__(self, mismatching: tuple[str, ...] = ()) -> None:
        self.mismatching = mismatching
        self.calls: list[str] = []

    def __call__(self, deployment: Deployment, url: str, log_text: str) -> VerifyResult:
        self.calls.append(deployment.variant)
        checks = [FieldCheck("attention_backend", "flashinfer", "flashinfer", "ok", "argv", "/x")]
        if deployment.variant in self.mismatching:
            checks.append(FieldCheck("kv_cache_dtype", "fp8_e4m3", "bfloat16", "mismatch",
                                     "argv", "/server_info"))
        return VerifyResult(base_url=url, profile=PROFILE.name, variant=deployment.variant,
                            sglang_version="0.5.23", checks=checks)


class Box:
    """One host: an engine with the image, a server that answers, a state directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.engine = FakeEngine(images={IMAGE: {labels.PATCH_SHA256: "abc"}})
        self.state = StateDir(tmp_path / "state")
        self.server = FakeSglang(SERVED, ["ready"])
        self.steps: list[str] = []
        self.pushed: list[dict[str, Any]] = []

    def gate(self, variant: str, smoke: FakeSmoke | None = None,
             verify: FakeVerify | None = None) -> gating.GateResult:
        return gating.gate(
            PROFILE.resolve(variant), launch=self.launch(verify or FakeVerify()),
            traffic=(smoke or FakeSmoke()).traffic(), on_step=self.steps.append,
            push=lambda kind, record, url: self.pushed.append({"kind": kind, **record}),
            gateway="http://pushgateway:9091",
        )

    def launch(self, verify: FakeVerify) -> Launch:
        return Launch(engine=self.engine, image_for=lambda _: IMAGE, state=self.state,
                      verify=verify, http=self.server.client, clock=FakeClock())

    def running(self) -> list[str]:
        return [c.labels[labels.VARIANT] for c in self.engine.containers.values()
                if c.status == "running"]


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def passed_baseline(box: Box) -> LastGood:
    result = box.gate("baseline")
    assert result.outcome == "passed" and result.error is None
    record = box.state.last_good(PROFILE.name)
    assert record is not None
    return record


# --- passing -------------------------------------------------------------------------------------


def test_a_pass_without_a_last_good_records_it(box: Box) -> None:
    box.engine.add_container("opsctl-sim", {labels.MANAGED: labels.TRUE, labels.ROLE:
                                            labels.ROLE_SERVER, labels.PROFILE: PROFILE.name,
                                            labels.VARIANT: "gathercast", labels.IMAGE: IMAGE})
    smoke = FakeSmoke()
    result = box.gate("baseline", smoke)
    assert result.outcome == "passed" and result.failed == [] and result.rolled_back is None
    assert box.running() == ["baseline"]  # what ran before was stopped first
    assert "stopped opsctl-sim" in box.steps
    (ask,) = smoke.asks
    assert ask.compare_with is None and "only the absolute gates apply" in result.comparison
    assert ask.evals.gsm8k and ask.evals.long_context  # the sim profile configures both evals
    assert smoke.pushed == [("smoke", "http://pushgateway:9091")]  # the gate's gateway
    record = box.state.last_good(PROFILE.name)
    assert record == result.last_good
    assert record is not None and (record.variant, record.image) == ("baseline", IMAGE)
    assert record.config_hash == PROFILE.resolve("baseline").config_hash()
    assert ask.report_path is not None
    assert Path(record.report) == ask.report_path and ask.report_path.is_file()
    assert record.checkpoint is not None and record.checkpoint.unavailable  # sim mounts none
    assert [(p["kind"], p["variant"], p["outcome"]) for p in box.pushed] == [
        ("gate", "baseline", "passed")]


def test_a_pass_of_the_same_attention_compares_with_the_last_good_report(box: Box) -> None:
    first = passed_baseline(box)
    smoke = FakeSmoke()
    result = box.gate("gathercast", smoke)
    assert result.outcome == "passed"
    assert smoke.asks[0].compare_with == Path(first.report)
    assert "compared with last good 'baseline'" in result.comparison
    record = box.state.last_good(PROFILE.name)
    assert record is not None and record.variant == "gathercast"


def test_dense_against_sparse_is_not_compared_and_says_so(box: Box) -> None:
    passed_baseline(box)
    smoke = FakeSmoke()
    result = box.gate("native", smoke)
    assert smoke.asks[0].compare_with is None
    assert "dense attention" in result.comparison and "sparse attention" in result.comparison
    assert "only the absolute gates apply" in result.comparison
    assert result.comparison in box.steps


# --- failing: X removed, the last good back, exit 5 ---------------------------------------------


@pytest.mark.parametrize("failing, gate_name", [
    ({"slo": "TPOT p50 90 ms > 60 ms"}, "smoke slo (TPOT p50 90 ms > 60 ms)"),
    ({"compare": "greedy outputs differ from variant 'baseline' in 3 of 3 prompts"},
     "compare (greedy outputs differ"),
    ({"gsm8k": "accuracy 0.40 < 0.90"}, "eval gsm8k (accuracy 0.40 < 0.90)"),
    ({"long_context": "needle_65536 missed"}, "eval long_context (needle_65536 missed)"),
])
def test_a_failed_smoke_gate_rolls_back_to_the_last_good(
    box: Box, failing: dict[str, str], gate_name: str
) -> None:
    first = passed_baseline(box)
    result = box.gate("corrupt", FakeSmoke(failing={"corrupt": failing}))
    assert result.outcome == "failed" and result.rolled_back == "baseline"
    assert box.running() == ["baseline"]
    error = result.error
    assert isinstance(error, GateFailed) and error.exit_code == EXIT_SMOKE
    assert (
        gate_name in error.message
        and "'corrupt' removed, rolled back to 'baseline'" in error.message
    )
    assert str(result.report) in error.hint
    assert box.state.last_good(PROFILE.name) == first  # unchanged
    assert box.pushed[-1]["outcome"] == "failed" and box.pushed[-1]["variant"] == "corrupt"


def test_a_verify_mismatch_rolls_back_without_smoking(box: Box) -> None:
    passed_baseline(box)
    smoke = FakeSmoke()
    result = box.gate("bf16kv", smoke, FakeVerify(mismatching=("bf16kv",)))
    assert result.error is not None and result.error.exit_code == EXIT_SMOKE
    assert "verify (" in result.error.message and "kv_cache_dtype" in result.error.message
    assert smoke.asks == [] and result.report is None
    assert box.running() == ["baseline"] and result.rolled_back == "baseline"


def test_a_server_dying_while_loading_is_the_launch_gate(box: Box) -> None:
    passed_baseline(box)
    box.engine.next_run = Behaviour(exit_after_inspects=1, exit_code=1, log=["CUDA error"])
    result = box.gate("bf16kv")
    assert result.error is not None and "launch (" in result.error.message
    assert box.running() == ["baseline"]


def test_without_a_last_good_nothing_is_rolled_back(box: Box) -> None:
    result = box.gate("corrupt", FakeSmoke(failing={"corrupt": {"slo": "too slow"}}))
    assert result.error is not None and result.rolled_back is None
    assert "nothing was rolled back: no last good variant is recorded" in result.error.message
    assert box.engine.containers == {}
    assert box.state.last_good(PROFILE.name) is None


def plain_up(box: Box, variant: str) -> None:
    """`opsctl up --variant VARIANT` without --gate: no last good is recorded."""
    box.launch(FakeVerify()).up(PROFILE.resolve(variant))
    assert box.running() == [variant] and box.state.last_good(PROFILE.name) is None


def test_a_first_gate_that_fails_brings_back_what_ran_before_it(box: Box) -> None:
    """Issue 25: with no last good recorded, a failed first gate stopped `baseline` (started
    by a plain `up`) and restored nothing."""
    plain_up(box, "baseline")
    verify = FakeVerify()
    result = box.gate("corrupt", FakeSmoke(failing={"corrupt": {"slo": "too slow"}}), verify)
    assert result.error is not None and result.error.exit_code == EXIT_SMOKE
    assert result.rolled_back == "baseline" and box.running() == ["baseline"]
    assert "rolled back to 'baseline' (running before the gate)" in result.error.message
    assert verify.calls == ["corrupt", "baseline"]  # brought back through the verified launch
    assert box.state.last_good(PROFILE.name) is None  # what ran before is no last good


def test_ctrl_c_in_a_first_gate_brings_back_what_ran_before_it(box: Box) -> None:
    plain_up(box, "baseline")
    with pytest.raises(KeyboardInterrupt):
        box.gate("corrupt", FakeSmoke(interrupt="corrupt"))
    assert box.running() == ["baseline"]
    assert box.state.last_good(PROFILE.name) is None


def test_a_first_gate_whose_relaunch_fails_names_what_no_longer_serves(box: Box) -> None:
    plain_up(box, "baseline")
    result = box.gate("corrupt", verify=FakeVerify(mismatching=("corrupt", "baseline")))
    assert result.error is not None and result.error.exit_code == EXIT_SMOKE
    assert "bringing back 'baseline' failed too" in result.error.message
    assert "nothing of profile 'sim' is serving" in result.error.message
    assert any("'baseline' (running before the gate) is no longer serving" in step
               for step in box.steps)
    assert box.engine.containers == {}


def test_a_first_gate_refuses_before_stopping_a_server_it_could_not_bring_back(
        box: Box) -> None:
    """What runs is a variant the profile no longer has: refused before anything stops (as an
    unrestorable last good is), never "nothing was running" followed by stopping it."""
    plain_up(box, "baseline")
    (container,) = box.engine.containers.values()
    container.labels[labels.VARIANT] = "baseline-old"
    with pytest.raises(UsageError, match="serves variant 'baseline-old'"):
        box.gate("corrupt", FakeSmoke(failing={"corrupt": {"slo": "too slow"}}))
    assert list(box.engine.containers.values()) == [container]
    assert "stop" not in box.engine.calls


def test_a_first_gate_with_nothing_running_says_so(box: Box) -> None:
    result = box.gate("corrupt", FakeSmoke(failing={"corrupt": {"slo": "too slow"}}))
    assert result.error is not None
    assert "nothing was running before the gate" in result.error.message
    assert any("nothing was running" in step for step in box.steps)


def test_a_failed_rollback_is_named_in_the_one_line(box: Box) -> None:
    passed_baseline(box)
    verify = FakeVerify(mismatching=("corrupt", "baseline"))  # the last good no longer verifies
    result = box.gate("corrupt", verify=verify)
    assert result.error is not None and result.rolled_back is None
    assert "bringing back 'baseline' failed too" in result.error.message
    assert verify.calls == ["corrupt", "baseline"] and box.engine.containers == {}


# --- Ctrl-C --------------------------------------------------------------------------------------


def test_ctrl_c_during_smoke_removes_it_and_brings_the_last_good_back(box: Box) -> None:
    first = passed_baseline(box)
    with pytest.raises(KeyboardInterrupt):
        box.gate("corrupt", FakeSmoke(interrupt="corrupt"))
    assert box.running() == ["baseline"]
    assert box.state.last_good(PROFILE.name) == first
    assert box.pushed[-1]["outcome"] == "interrupted"
    assert "interrupted: removing what this run started" in box.steps


def test_a_smoke_stopped_by_ctrl_c_is_no_pass(box: Box) -> None:
    """Issue 25, H2: smoke catches Ctrl-C and returns a partial report with no failed check;
    the gate took that for a pass, exited 0 and recorded the partial report as the last good."""
    first = passed_baseline(box)
    before = len(box.steps)
    with pytest.raises(Interrupted) as caught:
        box.gate("corrupt", FakeSmoke(partial="corrupt"))
    assert caught.value.exit_code == EXIT_INTERRUPTED
    assert box.state.last_good(PROFILE.name) == first  # the partial report is not recorded
    assert box.running() == ["baseline"]  # rolled back to the last good
    assert box.pushed[-1]["outcome"] == "interrupted"
    assert not any(step.startswith("passed") for step in box.steps[before:])
    assert "interrupted: removing what this run started" in box.steps[before:]


def test_a_first_gate_stopped_by_ctrl_c_records_nothing(box: Box) -> None:
    with pytest.raises(Interrupted):
        box.gate("baseline", FakeSmoke(partial="baseline"))
    assert box.state.last_good(PROFILE.name) is None
    assert box.running() == []


def test_a_partial_last_good_report_is_no_reference(box: Box) -> None:
    """A record an older opsctl wrote pointing at a partial report: never compared with."""
    first = passed_baseline(box)
    stale = SmokeReport.model_validate_json(Path(first.report).read_text())
    stale.partial, stale.passed = True, False
    write_report(stale, Path(first.report))
    smoke = FakeSmoke()
    box.gate("gathercast", smoke)
    assert smoke.asks[-1].compare_with is None


def test_ctrl_c_without_a_last_good_leaves_nothing_running(box: Box) -> None:
    with pytest.raises(KeyboardInterrupt):
        box.gate("corrupt", FakeSmoke(interrupt="corrupt"))
    assert box.engine.containers == {}


# --- refused before anything is stopped ----------------------------------------------------------


def test_refusals_come_before_anything_is_stopped(box: Box) -> None:
    passed_baseline(box)
    before = dict(box.engine.containers)
    with pytest.raises(UsageError, match="not its pin"):
        box.gate("corrupt", FakeSmoke(refuse=UsageError("dataset is not its pin")))
    box.engine.images.pop(IMAGE)
    with pytest.raises(LaunchError) as caught:
        box.gate("corrupt")
    assert caught.value.exit_code == EXIT_LAUNCH and "last good" in caught.value.message
    assert box.engine.containers == before and box.engine.stopped == []


def test_a_last_good_variant_gone_from_the_profile_is_refused(box: Box) -> None:
    record = LastGood(profile=PROFILE.name, variant="retired", image=IMAGE, config_hash="x",
                      report="/nowhere.json", at="2026-11-29T10:00:00+00:00")
    box.state.write_last_good(record)
    with pytest.raises(UsageError, match="no longer in profile") as caught:
        box.gate("baseline")
    assert str(box.state.last_good_path(PROFILE.name)) in caught.value.hint
    assert "run" not in box.engine.calls


def test_a_missing_last_good_report_is_not_compared(box: Box) -> None:
    first = passed_baseline(box)
    Path(first.report).unlink()
    smoke = FakeSmoke()
    result = box.gate("gathercast", smoke)
    assert smoke.asks[0].compare_with is None and "is gone" in result.comparison


def test_a_profile_without_evals_smokes_without_them(box: Box) -> None:
    bare = PROFILE.model_copy(update={"eval": type(PROFILE.eval)()})
    smoke = FakeSmoke()
    gating.gate(bare.resolve("baseline"), launch=box.launch(FakeVerify()),
                traffic=smoke.traffic())
    assert smoke.asks[0].evals == EvalPlan()



# --- the outcome as metrics ----------------------------------------------------------------------


def test_gate_outcomes_are_one_list_and_every_outcome_has_its_series() -> None:
    assert get_args(gating.Outcome) == GATE_OUTCOMES
    families = gate_families({"profile": "sim", "variant": "corrupt", "outcome": "failed",
                              "finished_at": 1764410400.0})
    outcome, stamp = families
    assert outcome.name == "opsctl_gate_last_outcome"
    assert {s.labels["outcome"]: s.value for s in outcome.samples} == {
        "passed": 0.0, "failed": 1.0, "interrupted": 0.0}
    assert all(s.labels["variant"] == "corrupt" for s in outcome.samples)
    assert stamp.name == "opsctl_gate_timestamp_seconds"
    assert stamp.samples[0].value == 1764410400.0
