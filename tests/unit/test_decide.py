"""`opsctl decide` against FakeEngine, FakeSglang, FakeClock, a fake verify, smoke and bench.

Every variant runs alone (stop-then-start) and nothing runs afterwards; a variant that does not
start, verify or pass smoke is disqualified with its reason and evidence and the run goes on;
greedy outputs are compared only between variants computing the same attention, and a
disagreement disqualifies neither; the winner reached the highest concurrency without failures,
then has the lowest TPOT p50 there; Ctrl-C leaves nothing running and a partial report.
tests/integration/test_decide_engine.py runs the command on the real engine with the simulator.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from fakes import Behaviour, FakeClock, FakeEngine, FakeSglang
from typer.testing import CliRunner

from opsctl.cli import app
from opsctl.config.profiles import Deployment, Profile, load_profile
from opsctl.config.sloconfig import Slo
from opsctl.core import labels
from opsctl.core.errors import (
    EXIT_INTERRUPTED,
    EXIT_LAUNCH,
    EXIT_SMOKE,
    DaemonUnreachable,
    LaunchError,
    OpsctlError,
    ProfileError,
    UsageError,
)
from opsctl.core.paths import project_root
from opsctl.decide import app as decide_app
from opsctl.decide.app import DecideRequest, DecideResult
from opsctl.decide.report import ChartWriter, DecideReport, VariantRecord
from opsctl.decide.settings import DecideSettings
from opsctl.deploy.app import ImageFor
from opsctl.deploy.launch import Launch
from opsctl.deploy.ownership import ProfileBusy
from opsctl.deploy.preflight import PreflightResult, run_preflight
from opsctl.deploy.state import StateDir
from opsctl.engine.api import ContainerInfo, RunSpec
from opsctl.engine.api import Engine as EngineApi
from opsctl.traffic.app import Traffic
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.records import record_level
from opsctl.traffic.bench.report import (
    BenchReport,
    ClientInfo,
    LevelResult,
    VariantResult,
)
from opsctl.traffic.bench.stats import summarize
from opsctl.traffic.bench.sweep import Target, request_files
from opsctl.traffic.client import RequestResult
from opsctl.traffic.evals.dataset import load_gsm8k
from opsctl.traffic.evals.gsm8k import EvalResult
from opsctl.traffic.evals.probes import ProbeResult
from opsctl.traffic.evals.score import score
from opsctl.traffic.smoke import SmokeOptions
from opsctl.traffic.smoke_report import CheckResult, GenerationRecord, SmokeReport
from opsctl.verify.app import VerifyResult
from opsctl.verify.checks import FieldCheck

PROFILE = load_profile("sim")
IMAGE = "opsctl/sim:test"
LEVELS = (1, 8)
PROMPTS = ("p0", "p1", "p2")


class Engine(FakeEngine):
    """One box: `crashing` variants exit while loading; a second server never runs beside one."""

    def __init__(self, crashing: tuple[str, ...] = ()) -> None:
        super().__init__(images={IMAGE: {labels.PATCH_SHA256: "abc"}})
        self.crashing = crashing
        self.started: list[str] = []

    def run(self, spec: RunSpec) -> ContainerInfo:
        assert not any(c.status == "running" for c in self.containers.values()), "stop first"
        variant = spec.labels[labels.VARIANT]
        self.started.append(variant)
        if variant in self.crashing:
            self.next_run = Behaviour(exit_after_inspects=1, exit_code=137,
                                      log=["torch.OutOfMemoryError: CUDA out of memory"])
        return super().run(spec)


class FakeVerify:
    def __init__(self, mismatching: tuple[str, ...] = ()) -> None:
        self.mismatching = mismatching

    def __call__(self, deployment: Deployment, url: str, log_text: str) -> VerifyResult:
        checks = [FieldCheck("tp_size", "8", "8", "ok", "argv", "/server_info")]
        if deployment.variant in self.mismatching:
            checks.append(FieldCheck("kv_cache_dtype", "fp8_e4m3", "bfloat16", "mismatch",
                                     "argv", "/server_info"))
        return VerifyResult(base_url=url, profile=PROFILE.name, variant=deployment.variant,
                            sglang_version="0.5.23", checks=checks)


class FakeSmoke:
    """Sends smoke's checks (Traffic.send_smoke): the same greedy outputs for every variant
    except `corrupting` ones; GSM8K and probes pass unless the variant is in `failing`;
    `interrupt` comes back partial, stopped by Ctrl-C. `asks`: the plans it was given."""

    def __init__(self, failing: tuple[str, ...] = (), corrupting: tuple[str, ...] = (),
                 interrupt: str | None = None, correct: dict[str, int] | None = None) -> None:
        self.failing, self.corrupting, self.interrupt = failing, corrupting, interrupt
        self.correct = correct or {}  # GSM8K answers right of 60, per variant (default 58)
        self.asks: list[SmokeOptions] = []

    def __call__(self, ask: SmokeOptions, client_factory: object) -> SmokeReport:
        self.asks.append(ask)
        name = ask.variant or ""
        bad = name in self.failing
        text = "The answer is 42 because six times seven"
        generations = [GenerationRecord(prompt_id=p, prompt=f"prompt {p}", max_tokens=32,
                                        text=text + (" is not 41" if name in self.corrupting
                                                     else " is 42"))
                       for p in PROMPTS]
        checks = [CheckResult(name="generations", status="pass", duration_s=0.0, detail="3 ok"),
                  CheckResult(name="gsm8k", status="fail" if bad else "pass", duration_s=0.0,
                              detail="accuracy below threshold" if bad else "ok")]
        gsm8k = EvalResult(dataset="d", dataset_sha256="a", shots_source="s", shots_sha256="b",
                           num_shots=5, max_tokens=256, stop=[], api="completions", duration_s=1,
                           score=score(30 if bad else self.correct.get(name, 58), 0, 0, 60,
                                       0.7), items=[])
        probes = [ProbeResult(name="needle-4k", kind="needle", passed=True, expected="1",
                              got="1", target_tokens=4096, prompt_tokens_approx=4096, depth=0.5,
                              duration_s=0.1, detail="found")]
        report = SmokeReport(started_at="2026-11-29T11:00:00+00:00", duration_s=1.0,
                             base_url=ask.base_url, profile=PROFILE.name, variant=name,
                             checks=checks, generations=generations, gsm8k=gsm8k,
                             long_context=probes, passed=not bad)
        return report.record_stop(KeyboardInterrupt() if name == self.interrupt else None)


def _level(concurrency: int, tpot_ms: float, failed: int) -> LevelResult:
    """Four requests at a TPOT near `tpot_ms` (a little spread, as measured), their records
    kept; the phase lasts one request's E2E, so throughput falls as TPOT grows."""
    itl = tpot_ms / 1000

    def ok(index: int) -> RequestResult:
        step = itl * (1 + 0.002 * (index - 1.5))
        return RequestResult(ok=True, ttft_s=0.1, e2e_s=0.1 + 10 * step, output_tokens=11,
                             itl_s=[step] * 10, token_source="usage", finish_reason="length",
                             started=0.0, prompt_tokens=100)

    results = [ok(i) for i in range(4)] + [
        RequestResult(ok=False, error_kind="timeout", error="x")] * failed
    level = summarize(concurrency, results, [], duration_s=0.1 + 10 * itl)
    level._records = record_level(results, 0.0, None)
    return level


class FakeBench:
    """Sends bench's sweep (Traffic.send_bench): `sweeps[variant]` = {concurrency: (TPOT p50
    ms, failed requests)}; bench writes bench.json. `asks`: the variant swept, each time."""

    def __init__(self, sweeps: dict[str, dict[int, tuple[float, int]]]) -> None:
        self.sweeps = sweeps
        self.asks: list[str] = []

    def __call__(self, targets: list[Target], options: BenchOptions,
                 **_: object) -> BenchReport:
        (target,) = targets
        levels_asked = options.settings.concurrency
        self.asks.append(target.label)
        sweep = self.sweeps.get(target.label, {c: (30.0, 0) for c in levels_asked})
        levels = [_level(c, *sweep[c]) for c in levels_asked]
        result = VariantResult(variant=target.label, base_url=target.base_url or "",
                               levels=levels)
        report = BenchReport(started_at="2026-11-29T11:00:00+00:00", duration_s=1.0,
                             config=options.config(),
                             client=ClientInfo(hostname="h", platform="p", python="3", cpu_count=1),
                             variants=[result], failed_requests=0, passed=True)
        report._requests = request_files(report.variants)
        return report


def no_client(*args: object, **kwargs: object) -> object:
    raise AssertionError("the fakes send nothing")


def traffic(smoke: object, bench: object, loaded: list[Path] | None = None) -> Traffic:
    """The traffic room as decide calls it, its sending replaced; `loaded`: each eval dataset
    read (checked against its pin)."""
    def load(path: Path, sha256: str) -> object:
        if loaded is not None:
            loaded.append(path)
        return load_gsm8k(path, sha256)

    return Traffic(api_key=None, client_factory=no_client, push=no_client,
                   load_dataset=load,  # type: ignore[arg-type]
                   plot=lambda report, out: [], send_smoke=smoke,  # type: ignore[arg-type]
                   send_bench=bench)


class Run:
    def __init__(self, tmp_path: Path, engine: Engine | None = None,
                 profile: Profile = PROFILE) -> None:
        self.profile = profile
        self.out = tmp_path / "decide"
        self.engine = engine or Engine()
        self.steps: list[str] = []
        self.progress: list[str] = []
        self.preflights: list[str] = []  # the variant of each preflight run
        self.loaded: list[Path] = []  # each eval dataset read (checked against its pin)

    def decide(self, variants: tuple[str, ...], *, smoke: FakeSmoke | None = None,
               bench: FakeBench | None = None, verify: FakeVerify | None = None,
               image_for: ImageFor | None = None, state: StateDir | None = None,
               chart: ChartWriter | None = None) -> DecideResult:
        def preflight(deployment: Deployment, engine: EngineApi, image: str) -> PreflightResult:
            self.preflights.append(deployment.variant)
            return run_preflight(deployment, engine, image)

        return decide_app.decide(
            self.profile, DecideRequest(variants=variants, out_dir=self.out,
                                   settings=DecideSettings(concurrency=LEVELS,
                                                           requests_per_level=4), chart=chart),
            launch=Launch(engine=self.engine, image_for=image_for or (lambda _: IMAGE),
                          verify=verify or FakeVerify(), state=state,
                          http=FakeSglang(PROFILE.model.served_name, ["ready"]).client,
                          clock=FakeClock(), preflight=preflight),
            traffic=traffic(smoke or FakeSmoke(), bench or FakeBench({}), self.loaded),
            on_step=self.steps.append,
            on_progress=self.progress.append)

    def running(self) -> list[str]:
        return [c.labels[labels.VARIANT] for c in self.engine.containers.values()]


def by_name(report: DecideReport) -> dict[str, VariantRecord]:
    return {r.variant: r for r in report.variants}


def test_the_variant_free_of_failures_at_the_highest_level_wins(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.engine.add_container("opsctl-sim", {labels.MANAGED: labels.TRUE, labels.ROLE:
                                            labels.ROLE_SERVER, labels.PROFILE: PROFILE.name,
                                            labels.VARIANT: "bf16kv"})
    bench = FakeBench({"baseline": {1: (30.0, 0), 8: (33.0, 0)},
                       "gathercast": {1: (24.0, 0), 8: (26.0, 0)},
                       "native": {1: (20.0, 0), 8: (19.0, 2)}})  # fastest, but fails at 8
    result = run.decide(("baseline", "gathercast", "native"), bench=bench)
    report = result.report
    assert result.error is None and report.winner == "gathercast"
    assert report.recommendation.startswith(
        "run gathercast: correct on every gate (start, verify, smoke, GSM8K, long-context probes)"
        " and 19% higher output throughput at 8 than baseline (122 [")
    assert "TPOT p50 26.0 vs 33.0 ms" in report.recommendation
    # Two repeats by default, interleaved: A B C A B C.
    assert run.engine.started == ["baseline", "gathercast", "native"] * 2
    assert run.running() == []
    assert f"baseline: stopped opsctl-sim; starting {IMAGE} (repeat 1 of 2)" in run.steps
    assert len(list(run.out.glob("sim-bf16kv-*.log"))) == 1  # what ran before: its log kept
    records = by_name(report)
    native = records["native"]
    best = native.best_level()
    assert native.status == "qualified" and best is not None and best.concurrency == 1
    assert records["baseline"].verify == "verified"
    accuracy = records["baseline"].accuracy
    assert accuracy is not None and accuracy.accuracy == pytest.approx(58 / 60)
    assert [(p.a, p.b, p.outcome) for p in report.pairs] == [
        ("baseline", "gathercast", "agree"), ("baseline", "native", "not compared"),
        ("gathercast", "native", "not compared")]
    assert "computes dense attention, native sparse attention" in report.pairs[1].detail
    assert [p for p in result.written] == [run.out / "decide.json", run.out / "decide.md"]
    for name in ("smoke.json", "bench.json", "bench.md", "verify.json"):
        assert (run.out / "01-baseline" / name).is_file(), name
    # saved by `down` before removal: one per repeat, the second in the repeat's own folder
    logs = sorted((run.out / "01-baseline").glob("**/*.log"))
    assert sorted(log.parent.name for log in logs) == ["01-baseline", "repeat-2"]
    assert all(str(log.relative_to(run.out)) in records["baseline"].evidence for log in logs)
    # The second repeat's verify and sweep, with its per-request records, beside the first's.
    assert (run.out / "01-baseline" / "repeat-2" / "verify.json").is_file()
    assert records["baseline"].evidence.count("01-baseline/verify.json") == 1
    assert (run.out / "01-baseline" / "repeat-2" / "bench.json").is_file()
    assert (
        run.out / "01-baseline" / "repeat-2" / "requests" / "01-baseline" / "c8.jsonl"
    ).is_file()
    assert [r.repeat for r in records["baseline"].runs] == [1, 2]
    assert run.preflights == ["baseline", "gathercast", "native"]  # the first repeat only
    pooled = records["gathercast"].level(8)
    assert pooled is not None and pooled.repeats == 2 and pooled.requests == 8
    assert pooled.tpot_p50_ci_ms is not None and pooled.output_tokens_per_s_ci is not None
    low, high = pooled.tpot_p50_ci_ms
    assert pooled.tpot_p50_ms is not None and low <= pooled.tpot_p50_ms <= high
    saved = DecideReport.model_validate_json((run.out / "decide.json").read_text())
    assert saved.winner == "gathercast" and not saved.partial
    # The settings the run was asked, defaults filled in, recorded once in decide.json.
    assert json.loads((run.out / "decide.json").read_text())["settings"] == {
        "repeats": 2, "margin_percent": 3.0, "concurrency": [1, 8], "requests_per_level": 4,
        "skip_eval": False, "timeout_s": None, "quick": False,
        # the workload: bench's knobs and defaults
        "input_words": 256, "output_tokens": 256, "api": "completions", "dataset": None,
        "dataset_path": None, "tokenizer": None, "seed": 0, "gsp_groups": 8,
        "gsp_prompts_per_group": 8, "gsp_prefix_len": 512, "multi_turn": 1,
        "trace_scale": 1.0, "range_ratio": 1.0, "length_pairs": [], "extra_request_body": None}
    page = (run.out / "decide.md").read_text()
    assert f"**{report.recommendation}**" in page
    assert "[smoke](01-baseline/smoke.json) [bench](01-baseline/bench.json)" in page
    assert "| native | 8 | 2 | 12 | 19.00 [18.94-19.06] |" in page
    assert "| native | 2 | 8 | 19.00 | 151.7 | 2 | [bench](03-native/repeat-2/bench.json) |" in page
    # What the release resolves beside what the server said, per variant, from verify's checks.
    assert "## What sglang resolves, and what the server said" in page
    assert "| baseline | tp_size | 8 | argv | 8 | ok |" in page
    assert records["baseline"].resolved[0].field == "tp_size"


def test_input_tokens_per_second_reach_bench_and_decide_reports(tmp_path: Path) -> None:
    """Each level's server-counted prompt tokens over its measured phase: in bench.json and
    bench.md, and pooled over the repeats (their mean) in decide.json and decide.md."""
    run = Run(tmp_path)
    result = run.decide(("baseline",), bench=FakeBench({"baseline": {1: (30.0, 0),
                                                                     8: (40.0, 0)}}))
    swept = BenchReport.model_validate_json((run.out / "01-baseline" / "bench.json").read_text())
    level = swept.variants[0].levels[1]
    assert level.input_tokens == 400
    assert level.input_tokens_per_s == pytest.approx(400 / level.duration_s, rel=1e-3)
    assert "| input tok/s |" in (run.out / "01-baseline" / "bench.md").read_text()
    pooled = by_name(result.report)["baseline"].level(8)
    assert pooled is not None and pooled.repeats == 2
    assert pooled.input_tokens_per_s == pytest.approx(level.input_tokens_per_s, rel=1e-3)
    page = (run.out / "decide.md").read_text()
    assert "| TPOT p90 (ms) | input tok/s | output tok/s [95% CI] |" in page
    assert f"| {pooled.input_tokens_per_s:.1f} | " in page


def test_decide_md_embeds_a_chart_of_every_variant_and_level(tmp_path: Path) -> None:
    matplotlib = pytest.importorskip("matplotlib", reason="the chart is the [plot] extra")
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from opsctl.decide import view

    run = Run(tmp_path)
    bench = FakeBench({"baseline": {1: (30.0, 0), 8: (33.0, 0)},
                       "gathercast": {1: (24.0, 0), 8: (26.0, 0)}})
    result = run.decide(("baseline", "gathercast"), bench=bench, chart=view.write_chart)
    report = result.report
    assert result.written == [run.out / "decide.json", run.out / "decide.md",
                              run.out / "decide.png"]
    assert (run.out / "decide.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](decide.png)" in (run.out / "decide.md").read_text()
    fig = view.comparison_chart(plt, report, run.out)
    tpot, rate, pareto = fig.axes
    assert all(ax.get_ylim()[0] == 0 for ax in fig.axes)  # zero-based
    assert report.slo_tpot_ms == 60 and [
        line.get_ydata()[0] for line in tpot.get_lines() if list(line.get_xdata()) == [0, 1]
    ] == [60.0]  # the SLO as a line
    assert [line.get_label() for line in pareto.get_lines()][:2] == ["baseline", "gathercast"]
    gathercast = report.variants[1]
    assert [lv.concurrency for lv in gathercast.levels] == [1, 8]
    assert list(pareto.get_lines()[1].get_xdata()) == pytest.approx(
        [1000.0 / (lv.tpot_p50_ms or 1) for lv in gathercast.levels])  # every level
    title = fig._suptitle.get_text()
    for part in ("opsctl decide: gathercast", "profile sim", "baseline, gathercast",
                 "ISL ~256 words / OSL 256 tokens", report.started_at[:10]):
        assert part in title, (part, title)
    plt.close(fig)
    # Rescored, the chart is drawn again beside the rescored page.
    again = decide_app.rescore(run.out, PROFILE.slo, chart=view.write_chart)
    assert run.out / "decide-rescored.png" in again.written
    assert "](decide-rescored.png)" in (run.out / "decide-rescored.md").read_text()


def test_no_chart_without_a_measured_level(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the chart is the [plot] extra")
    from opsctl.decide import view

    report = DecideReport(started_at="t", profile="sim", concurrency=[1], requests_per_level=4,
                          skip_eval=True, variants=[])
    assert view.write_chart(report, tmp_path, "decide.png") is None
    assert list(tmp_path.iterdir()) == []


def test_a_disagreement_is_evidence_not_a_disqualification(tmp_path: Path) -> None:
    run = Run(tmp_path)
    bench = FakeBench({"baseline": {1: (30.0, 0), 8: (33.0, 0)},
                       "corrupt": {1: (25.0, 0), 8: (26.0, 0)},  # clear of the margin
                       "bf16kv": {1: (35.0, 0), 8: (36.0, 0)}})
    result = run.decide(("baseline", "corrupt", "bf16kv"), bench=bench,
                        smoke=FakeSmoke(corrupting=("corrupt", "bf16kv")))
    report = result.report
    assert [r.status for r in report.variants] == ["qualified"] * 3
    pair, kv, same = report.pairs
    assert pair.outcome == "disagree" and pair.divergence is not None
    assert pair.detail.startswith("corrupt and baseline disagree at request 0 (p0), character 44")
    assert pair.detail.endswith(": one of them is wrong; the eval decides")
    assert (kv.a, kv.b, kv.outcome) == ("baseline", "bf16kv", "disagree")
    assert kv.detail.endswith(": their KV caches differ (fp8_e4m3 vs bf16), so rounding alone "
                              "may explain it; the eval decides")
    assert (same.a, same.b, same.outcome) == ("corrupt", "bf16kv", "agree")
    assert report.winner == "corrupt" and result.error is None
    assert report.recommendation.endswith(
        "; note: its greedy outputs disagree with baseline's (one of them is wrong: see decide.md)")


def test_failed_gates_disqualify_with_reason_and_evidence_and_the_run_goes_on(
        tmp_path: Path) -> None:
    run = Run(tmp_path, Engine(crashing=("gathercast",)))
    smoke, bench = FakeSmoke(failing=("bf16kv",)), FakeBench({})
    result = run.decide(("baseline", "gathercast", "bf16kv", "native"), smoke=smoke, bench=bench,
                        verify=FakeVerify(mismatching=("baseline",)))
    records = by_name(result.report)
    out = run.out
    baseline, gathercast, bf16kv = records["baseline"], records["gathercast"], records["bf16kv"]
    assert (baseline.status, baseline.failed_gate) == ("disqualified", "verify")
    assert "kv_cache_dtype" in str(baseline.reason)
    assert json.loads((out / "01-baseline" / "verify.json").read_text())["ok"] is False
    assert (gathercast.failed_gate, gathercast.exit_code) == ("start", EXIT_LAUNCH)
    assert "CUDA out of memory" in (out / "02-gathercast" / "up-error.txt").read_text()
    up_error, log = gathercast.evidence  # the log saved by `up` as it removed the container
    assert up_error == "02-gathercast/up-error.txt" and log.endswith(".log")
    assert "CUDA out of memory" in (out / log).read_text()
    assert bf16kv.failed_gate == "smoke" and "gsm8k" in str(bf16kv.reason)
    assert "03-bf16kv/smoke.json" in bf16kv.evidence
    assert [a.variant for a in smoke.asks] == ["bf16kv", "native"]
    # Disqualified: no sweep, and not run again in the second repeat (smoke ran once).
    assert bench.asks == ["native", "native"]
    assert run.engine.started.count("native") == 2 and run.engine.started.count("baseline") == 1
    assert result.report.winner == "native" and result.error is None
    assert (
        "and the only one of 4 that was; 110 [110-110] output tok/s" in result.report.recommendation
    )
    assert "output tok/s, TPOT p50 30.0 ms at concurrency 8" in result.report.recommendation
    assert [p.a + "/" + p.b for p in result.report.pairs] == ["bf16kv/native"]
    assert run.running() == []
    page = (out / "decide.md").read_text()
    assert "### Disqualified" in page
    assert "[smoke.json](03-bf16kv/smoke.json)" in page  # labelled inside the variant's folder


def test_no_qualified_variant_is_exit_5(tmp_path: Path) -> None:
    result = Run(tmp_path).decide(("baseline", "gathercast"),
                                  smoke=FakeSmoke(failing=("baseline", "gathercast")))
    assert result.report.winner is None and result.error is not None
    assert result.error.exit_code == EXIT_SMOKE
    assert result.report.recommendation.startswith("no variant qualified: baseline (smoke:")


def test_failures_at_every_level_leave_nothing_to_recommend(tmp_path: Path) -> None:
    bench = FakeBench({"baseline": {1: (30.0, 1), 8: (30.0, 0)}})
    result = Run(tmp_path).decide(("baseline",), bench=bench)
    assert result.error is not None and result.error.exit_code == EXIT_SMOKE
    assert "failed requests at the first level" in result.report.recommendation


def test_when_no_variant_can_start_the_launch_failure_is_the_exit_code(tmp_path: Path) -> None:
    run = Run(tmp_path, Engine(crashing=("baseline", "gathercast")))
    result = run.decide(("baseline", "gathercast"))
    assert isinstance(result.error, LaunchError) and result.error.exit_code == EXIT_LAUNCH
    assert "no variant could start; baseline:" in result.error.message


def test_ctrl_c_removes_the_server_and_writes_a_partial_report(tmp_path: Path) -> None:
    run = Run(tmp_path)
    bench = FakeBench({})
    result = run.decide(("baseline", "gathercast", "native"),
                        smoke=FakeSmoke(interrupt="gathercast"), bench=bench)
    assert result.error is not None and result.error.exit_code == EXIT_INTERRUPTED
    assert run.running() == [] and bench.asks == ["baseline"]
    saved = DecideReport.model_validate_json((run.out / "decide.json").read_text())
    assert saved.partial and saved.winner is None
    assert [r.status for r in saved.variants] == ["qualified", "interrupted", "not run"]
    assert saved.recommendation == "interrupted after 2 of 3 variant(s): no recommendation"
    assert "**Partial run** (interrupted (Ctrl-C))" in (run.out / "decide.md").read_text()


def test_refusals_come_before_anything_is_stopped(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.engine.add_container("opsctl-sim", {labels.MANAGED: labels.TRUE, labels.ROLE:
                                            labels.ROLE_SERVER, labels.PROFILE: PROFILE.name,
                                            labels.VARIANT: "bf16kv"})
    with pytest.raises(LaunchError, match="is not present on this engine"):
        run.decide(("baseline", "native"), image_for=lambda d: IMAGE
                   if d.variant == "baseline" else "opsctl/sim:missing")
    with pytest.raises(UsageError, match="twice"):
        run.decide(("baseline", "baseline"))
    with pytest.raises(UsageError, match="no variant 'nope'"):
        run.decide(("nope",))
    assert run.running() == ["bf16kv"] and run.engine.started == []


def test_a_profile_busy_in_another_process_stops_decide_before_anything_is_touched(
        tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state")
    lock = state.lock_path(PROFILE.name)
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"f = open({str(lock)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
         "f.write('`opsctl up` (pid 1)'); f.flush(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        run = Run(tmp_path)
        run.engine.add_container("opsctl-sim", {labels.MANAGED: labels.TRUE, labels.ROLE:
                                                labels.ROLE_SERVER, labels.PROFILE: PROFILE.name,
                                                labels.VARIANT: "bf16kv"})
        with pytest.raises(ProfileBusy, match="is busy"):
            run.decide(("baseline", "gathercast"), state=state)
        assert run.running() == ["bf16kv"] and run.engine.started == []
        assert not (run.out / "decide.json").exists()
    finally:
        holder.kill()
        holder.wait()


def test_every_variant_of_the_profile_by_default_and_evals_as_the_profile_says(
        tmp_path: Path) -> None:
    smoke, run = FakeSmoke(), Run(tmp_path)
    result = run.decide((), smoke=smoke)
    assert [r.variant for r in result.report.variants] == list(PROFILE.variants)
    assert all(ask.evals.gsm8k and ask.evals.long_context and ask.compare_with is None
               for ask in smoke.asks)
    # The datasets were checked against their pins before the first launch, and per smoke.
    assert len(run.loaded) == 2 * (1 + len(smoke.asks))


@pytest.mark.parametrize("args, message", [
    (["--concurrency", "1,x"], "not a comma-separated list"),
    (["--variants", "baseline,nope"], "no variant 'nope'"),
])
def test_bad_usage_is_refused_before_the_engine_is_asked(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["decide", "--profile", "sim", *args])
    assert isinstance(result.exception, OpsctlError) and result.exception.exit_code == 2
    assert message in result.exception.message


def test_progress_says_which_variant_and_phase_and_what_is_left(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.decide(("baseline", "gathercast"))
    lines = run.progress
    assert lines[0].startswith("[1/4] variant 1 of 2 (baseline), repeat 1 of 2: up; elapsed ")
    assert lines[0].endswith("time left known after the first variant")
    phases = [line.split(": ", 1)[1].split(";")[0] for line in lines]
    assert phases[:4] == ["up", "smoke (with evals)", "bench", "down"]
    # The second repeat runs no smoke; every line after the first variant estimates what is left.
    assert [line.split("]")[0] for line in lines if ": smoke" in line] == ["[1/4", "[2/4"]
    assert lines[-1].startswith("[4/4] variant 2 of 2 (gathercast), repeat 2 of 2: down")
    assert all(" left" in line and "known after" not in line for line in lines[4:])


def test_rescore_judges_a_finished_run_again_from_its_files(tmp_path: Path) -> None:
    run = Run(tmp_path)
    bench = FakeBench({"baseline": {1: (30.0, 0), 8: (33.0, 0)},
                       "gathercast": {1: (24.0, 0), 8: (26.0, 0)}})
    first = run.decide(("baseline", "gathercast"), bench=bench)
    assert first.report.winner == "gathercast"
    # TPOT at most 28 ms: baseline meets it nowhere, gathercast at both levels.
    tpot28 = Slo.model_validate({"tpot": {"quantile": 0.5, "threshold_ms": 28}})
    again = decide_app.rescore(run.out, tpot28)
    assert again.report.winner == "gathercast" and again.report.slo_tpot_ms == 28
    assert [p.name for p in again.written] == ["decide-rescored.json", "decide-rescored.md"]
    baseline = by_name(again.report)["baseline"]
    assert [lv.meets_slo for lv in baseline.levels] == [False, False]
    assert baseline.best_level() is None
    none = decide_app.rescore(run.out, Slo.model_validate(
        {"tpot": {"quantile": 0.5, "threshold_ms": 1}}))
    assert none.report.winner is None and none.error is not None
    assert none.error.exit_code == EXIT_SMOKE and "met the SLO at none" in none.error.message
    # The original record is untouched.
    assert DecideReport.model_validate_json((run.out / "decide.json").read_text()).winner == \
        "gathercast"
    with pytest.raises(UsageError, match="decide report"):
        decide_app.rescore(tmp_path / "nothing", tpot28)


def test_rescore_keeps_the_runs_margin_unless_margin_is_given(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.decide(("baseline", "gathercast"))
    recorded = run.out / "decide.json"
    report = DecideReport.model_validate_json(recorded.read_text())
    report.margin = 0.10  # as a run with --margin 10 recorded it
    recorded.write_text(report.model_dump_json())
    rescored = run.out / "decide-rescored.json"
    for args, margin in (([], 0.10), (["--margin", "5"], 0.05)):
        result = CliRunner().invoke(app, ["decide", "--profile", "sim", "--rescore", str(run.out),
                                          *args])
        assert result.exit_code == 0, result.output
        assert DecideReport.model_validate_json(rescored.read_text()).margin == margin


@pytest.mark.parametrize("failure", [
    DaemonUnreachable("the Docker engine stopped answering: ConnectionError (while listing "
                      "containers)"),
    DaemonUnreachable("the Docker engine failed mid-call (500: write /var/lib/docker/...: no "
                      "space left on device) while removing a container"),
], ids=["daemon-lost", "enospc"])
def test_a_teardown_that_cannot_remove_the_container_names_it(
        tmp_path: Path, failure: DaemonUnreachable) -> None:
    """Issue 25: after daemon loss or on a full disk, decide left a container without naming
    it; the one line and decide.json/decide.md now name it and the command that removes it."""
    run = Run(tmp_path)
    lost = failure.message.startswith("the Docker engine stopped")

    def bench(targets: list[Target], options: BenchOptions, **_: object) -> BenchReport:
        report = FakeBench({})(targets, options)
        # From here on the engine cannot remove (and, when lost, not even list) containers.
        run.engine.fail("stop", failure, times=100)
        if lost:
            run.engine.fail("find", failure, times=100)
        return report

    with pytest.raises(DaemonUnreachable) as caught:
        decide_app.decide(
            PROFILE,
            DecideRequest(
                variants=("baseline", "gathercast"),
                out_dir=run.out,
                settings=DecideSettings(concurrency=LEVELS, requests_per_level=4),
            ),
            launch=Launch(
                engine=run.engine,
                image_for=lambda _: IMAGE,
                verify=FakeVerify(),
                state=None,
                http=FakeSglang(PROFILE.model.served_name, ["ready"]).client,
                clock=FakeClock(),
            ),
            traffic=traffic(FakeSmoke(), bench),
            on_step=run.steps.append,
        )
    (container,) = run.engine.containers.values()
    named = f"{container.name} ({container.id[:12]}) is left"
    assert named in caught.value.message
    assert f"`opsctl down --profile {PROFILE.name}`" in caught.value.message
    saved = json.loads((run.out / "decide.json").read_text())
    assert saved["partial"] is True
    assert any(named in line for line in saved["left_behind"])
    assert named in (run.out / "decide.md").read_text()


def _decide_with(run: Run, bench: Callable[..., BenchReport]) -> DecideResult:
    return decide_app.decide(
        PROFILE, DecideRequest(variants=("baseline", "gathercast"), out_dir=run.out,
                               settings=DecideSettings(concurrency=LEVELS, requests_per_level=4)),
        launch=Launch(engine=run.engine, image_for=lambda _: IMAGE, verify=FakeVerify(), state=None,
                      http=FakeSglang(PROFILE.model.served_name, ["ready"]).client,
                      clock=FakeClock()),
        traffic=traffic(FakeSmoke(), bench), on_step=run.steps.append)


def test_a_teardown_that_fails_once_is_not_reported_as_leaving_the_container(
        tmp_path: Path) -> None:
    """The clean-up tries again and removes it: the line must not say it is left."""
    run = Run(tmp_path)
    failure = DaemonUnreachable("the Docker engine failed mid-call (500: boom) while stopping")

    def bench(targets: list[Target], options: BenchOptions, **_: object) -> BenchReport:
        report = FakeBench({})(targets, options)
        run.engine.fail("stop", failure, times=1)
        return report

    with pytest.raises(DaemonUnreachable) as caught:
        _decide_with(run, bench)
    assert run.engine.containers == {}
    assert "is left" not in caught.value.message
    assert json.loads((run.out / "decide.json").read_text())["left_behind"] == []


@pytest.mark.parametrize("cause", [KeyboardInterrupt(), RuntimeError("a bug in bench")],
                         ids=["ctrl-c", "bug"])
def test_a_failing_teardown_never_replaces_a_ctrl_c_or_a_bug(tmp_path: Path,
                                                             cause: BaseException) -> None:
    """Ctrl-C stays exit 130 and a bug stays a bug (exit 1, its traceback), whatever the
    teardown then meets; what is left is still named in the report."""
    run = Run(tmp_path)
    failure = DaemonUnreachable("the Docker engine stopped answering (while stopping)")

    def bench(targets: list[Target], options: BenchOptions, **_: object) -> BenchReport:
        run.engine.fail("stop", failure, times=100)
        run.engine.fail("find", failure, times=100)
        raise cause

    if isinstance(cause, KeyboardInterrupt):
        result = _decide_with(run, bench)
        assert result.error is not None and result.error.exit_code == EXIT_INTERRUPTED
    else:
        with pytest.raises(RuntimeError, match="a bug in bench"):
            _decide_with(run, bench)
    saved = json.loads((run.out / "decide.json").read_text())
    assert saved["partial"] is True and saved["left_behind"]


def _sim_copy(tmp_path: Path, **server: object) -> str:
    """deploy/sim.yaml with `server` settings changed, as a file."""
    data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    data["server"].update(server)
    path = tmp_path / "sim-copy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


@pytest.mark.parametrize("args, message", [
    (["--extra-request-body", "[1]"], "--extra-request-body: a JSON object is needed"),
    (["--extra-request-body", "{\"stream\": false}"], "sets stream, which bench sets itself"),
    (["--extra-request-body", "{\"ignore_eos\": false}"], "sets ignore_eos, which bench"),
    (["--extra-request-body", "{\"temperature\": 0.7}"], "sets temperature, which bench"),
    (["--extra-request-body", "{\"max_completion_tokens\": 9}"], "sets max_completion_tokens"),
    (["--extra-request-body", "{\"top_p\": NaN}"], "not JSON (NaN is Python's"),
    (["--extra-request-body", "{not json"], "--extra-request-body: not JSON"),
    (["--dataset-name", "mooncake-trace", "--dataset-path", "TRACE"], ":1: not JSON"),
    (["--dataset-name", "nope"], "--dataset-name 'nope': choose one of"),
    (["--input-words", "1000", "--output-tokens", "100"],
     "(1100 tokens) exceed the model's context of 1024 tokens (server.context_length)"),
    (["--isl-osl", "256:64,1000:100"],
     "(1100 tokens) exceed the model's context of 1024 tokens (server.context_length)"),
    (["--isl-osl", "256"], "--isl-osl '256' is not ISL:OSL"),
    (["--isl-osl", "256:64", "--dataset-name", "sharegpt", "--dataset-path", "TRACE"],
     "--isl-osl with --dataset-name sharegpt"),
], ids=["body-list", "body-own-key", "body-ignore-eos", "body-temperature", "body-max-completion",
        "body-nan", "body-not-json", "trace-not-jsonl", "dataset", "context", "pairs-context",
        "pairs-shape", "pairs-dataset"])
def test_a_workload_the_sweeps_cannot_send_is_exit_2_before_the_engine_is_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str) -> None:
    """One line, exit 2, before anything starts: the engine is never connected."""
    from opsctl.engine import dockerpy

    monkeypatch.setattr(dockerpy, "connect", lambda *a, **k: pytest.fail("engine asked"))
    trace = tmp_path / "trace.txt"
    trace.write_text("timestamp,input_length\n0,10\n")
    args = [str(trace) if arg == "TRACE" else arg for arg in args]
    result = CliRunner().invoke(app, ["decide", "--profile",
                                      _sim_copy(tmp_path, context_length=1024), *args])
    assert isinstance(result.exception, OpsctlError), result.output
    assert result.exception.exit_code == 2 and message in result.exception.message
    assert "\n" not in result.exception.message


def test_decide_sweeps_the_workload_it_was_given_and_says_so(tmp_path: Path) -> None:
    """bench's workload options, one definition for both commands: decide's sweeps send them,
    decide.json records them and decide.md states the workload judged on."""
    bench = FakeBench({})
    sent: list[BenchOptions] = []

    def recording(targets: list[Target], options: BenchOptions, **_: object) -> BenchReport:
        sent.append(options)
        return bench(targets, options)

    run = Run(tmp_path)
    body = {"chat_template_kwargs": {"enable_thinking": False}}
    result = decide_app.decide(
        PROFILE, DecideRequest(variants=("baseline",), out_dir=run.out, settings=DecideSettings(
            concurrency=LEVELS, requests_per_level=4, repeats=1, input_words=64,
            output_tokens=32, dataset="words", extra_request_body=body)),
        launch=Launch(engine=run.engine, image_for=lambda _: IMAGE, verify=FakeVerify(),
                      state=None, http=FakeSglang(PROFILE.model.served_name, ["ready"]).client,
                      clock=FakeClock()),
        traffic=traffic(FakeSmoke(), recording))
    assert result.error is None
    (options,) = sent
    asked = options.settings
    assert (asked.input_words, asked.output_tokens, asked.dataset) == (64, 32, "words")
    assert asked.extra_request_body == body and options.work().name == "words"
    saved = json.loads((run.out / "decide.json").read_text())["settings"]
    assert saved["extra_request_body"] == body and saved["input_words"] == 64
    page = (run.out / "decide.md").read_text()
    assert ("Workload: dataset words; 64 prompt words or tokens, 32 output tokens; api "
            "completions; extra request body {\"chat_template_kwargs\": {\"enable_thinking\": "
            "false}} (seed 0).") in page


def test_decide_judges_a_mix_of_isl_osl_pairs_and_says_so(tmp_path: Path) -> None:
    sent: list[BenchOptions] = []
    bench = FakeBench({})

    def recording(targets: list[Target], options: BenchOptions, **_: object) -> BenchReport:
        sent.append(options)
        return bench(targets, options)

    run = Run(tmp_path)
    pairs = ((64, 16), (128, 8))
    result = decide_app.decide(
        PROFILE, DecideRequest(variants=("baseline",), out_dir=run.out, settings=DecideSettings(
            concurrency=LEVELS, requests_per_level=4, repeats=1, dataset="words",
            length_pairs=pairs)),
        launch=Launch(engine=run.engine, image_for=lambda _: IMAGE, verify=FakeVerify(),
                      state=None, http=FakeSglang(PROFILE.model.served_name, ["ready"]).client,
                      clock=FakeClock()),
        traffic=traffic(FakeSmoke(), recording))
    assert result.error is None
    (options,) = sent
    work = options.work()
    assert [work.item(i).output_tokens for i in range(4)] == [16, 8, 16, 8]
    saved = json.loads((run.out / "decide.json").read_text())["settings"]
    assert saved["length_pairs"] == [[64, 16], [128, 8]]
    assert ("ISL:OSL pairs 64:16, 128:8 (request i takes pair i mod 2)"
            in (run.out / "decide.md").read_text())


def test_quick_shortens_what_was_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """--quick: one repeat, two short levels, short answers; an option given keeps its value."""
    asked: list[DecideSettings] = []

    def capture(profile: object, request: DecideRequest, **_: object) -> DecideResult:
        asked.append(request.settings)
        raise KeyboardInterrupt

    from opsctl.engine import dockerpy

    monkeypatch.setattr(dockerpy, "connect", lambda *a, **k: FakeEngine())
    monkeypatch.setattr(decide_app, "decide", capture)
    CliRunner().invoke(app, ["decide", "--profile", "sim", "--quick", "--repeats", "3"])
    (settings,) = asked
    assert (settings.quick, settings.repeats, settings.concurrency) == (True, 3, (1, 8))
    assert (settings.requests_per_level, settings.output_tokens) == (8, 64)


def _with_reference(reference: str, drop: float) -> Profile:
    evals = PROFILE.eval.model_copy(update={"reference": reference, "max_accuracy_drop": drop})
    return PROFILE.model_copy(update={"eval": evals})


def test_a_variant_further_below_the_references_gsm8k_than_the_profile_allows_is_out(
        tmp_path: Path) -> None:
    run = Run(tmp_path, profile=_with_reference("bf16kv", 0.05))
    bench = FakeBench({"bf16kv": {1: (20.0, 0), 8: (22.0, 0)},
                       "baseline": {1: (15.0, 0), 8: (16.0, 0)},
                       "gathercast": {1: (10.0, 0), 8: (11.0, 0)}})
    # bf16kv 58/60; baseline 57/60 (0.017 below: within); gathercast 48/60 (0.167 below)
    smoke = FakeSmoke(correct={"baseline": 57, "gathercast": 48})
    result = run.decide(("bf16kv", "baseline", "gathercast"), smoke=smoke, bench=bench)
    records = by_name(result.report)
    gathercast = records["gathercast"]
    assert gathercast.status == "disqualified" and gathercast.failed_gate == "accuracy"
    assert "0.167 below bf16kv's 0.967" in str(gathercast.reason)
    assert records["baseline"].status == "qualified"
    # The fastest variant lost on accuracy; the verdict names the gate it passed:
    assert result.report.winner == "baseline"
    assert "within 0.05 of bf16kv's GSM8K" in result.report.recommendation
    page = (run.out / "decide.md").read_text()
    assert "Accuracy reference: bf16kv, GSM8K 0.967" in page


def test_without_the_reference_in_the_run_no_accuracy_gate_is_claimed(tmp_path: Path) -> None:
    run = Run(tmp_path, profile=_with_reference("bf16kv", 0.05))
    bench = FakeBench({"baseline": {1: (20.0, 0), 8: (22.0, 0)},
                       "gathercast": {1: (10.0, 0), 8: (11.0, 0)}})
    smoke = FakeSmoke(correct={"gathercast": 40})
    result = run.decide(("baseline", "gathercast"), smoke=smoke, bench=bench)
    assert by_name(result.report)["gathercast"].status == "qualified"
    assert "bf16kv's GSM8K" not in result.report.recommendation
    assert "Accuracy reference: bf16kv did not run" in (run.out / "decide.md").read_text()


def test_a_reference_that_is_no_variant_is_refused_at_load(tmp_path: Path) -> None:
    text = (project_root() / "deploy" / "sim.yaml").read_text()
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("\neval:\n", "\neval:\n  reference: nosuch\n", 1))
    with pytest.raises(ProfileError, match="eval.reference 'nosuch' is not among the variants"):
        load_profile(str(path))
