"""decide's verdict under noise, on real sweeps of the simulator: two variants whose decode steps
are 1% apart are a tie; 20% apart, the faster one wins. Each variant is swept twice, interleaved
(A B A B), by bench's own sweep; the verdict pools the repeats from the requests files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conftest import SimServer

from opsctl.config.sloconfig import Slo
from opsctl.decide import app as decide_app
from opsctl.decide.report import DecideReport, RunRecord, VariantRecord
from opsctl.decide.report import markdown as decide_markdown
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.serving import write_report_files
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.settings import BenchSettings

StartSim = Callable[..., SimServer]
SLO = Slo.model_validate({"tpot": {"quantile": 0.5, "threshold_ms": 1000}})
ITL_MS = 30.0


def _record(name: str, index: int) -> VariantRecord:
    return VariantRecord(variant=name, description="", release="0.5.23", image="i", computes="c",
                         attention="dense attention", kv_cache_dtype=None,
                         directory=f"{index + 1:02d}-{name}", status="qualified")


def _decide(sim_server: StartSim, out: Path, slower_by: float) -> DecideReport:
    urls = [sim_server(env={"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": str(itl)},
                       args=["--served-model-name", "glm-5"]).url
            for itl in (ITL_MS, ITL_MS * (1 + slower_by))]
    records = [_record("fast", 0), _record("slow", 1)]
    options = BenchOptions(BenchSettings(concurrency=(4,), requests_per_level=16, input_words=16,
                                         output_tokens=24, request_timeout_s=30.0),
                           server_figures=False, slo=SLO)
    for repeat in (1, 2):
        for record, url in zip(records, urls, strict=True):
            folder = out / record.directory / f"repeat-{repeat}"
            report = run_bench([Target(record.variant, url)], options)
            assert report.passed
            write_report_files(report, folder)
            record.runs.append(RunRecord(repeat=repeat,
                                         bench_report=f"{record.directory}/repeat-{repeat}/"
                                                      "bench.json"))
    report = DecideReport(started_at="t", profile="sim", concurrency=[4], requests_per_level=16,
                          skip_eval=True, variants=records, repeats=2, slo_tpot_ms=1000)
    decide_app.conclude(report, out, SLO)
    return report


def test_variants_one_percent_apart_are_a_tie(sim_server: StartSim, tmp_path: Path) -> None:
    report = _decide(sim_server, tmp_path, 0.01)
    assert report.winner is None and sorted(report.tie) == ["fast", "slow"], report.recommendation
    assert report.recommendation.startswith("tie: ")
    assert "to separate them: more repeats (--repeats 4)" in report.recommendation
    for record in report.variants:
        (level,) = record.levels
        assert level.repeats == 2 and level.requests == 32 and level.meets_slo is True
        assert level.output_tokens_per_s_ci is not None and level.tpot_p50_ci_ms is not None
    assert "[" in decide_markdown(report)


def test_variants_twenty_percent_apart_pick_the_faster(sim_server: StartSim,
                                                       tmp_path: Path) -> None:
    report = _decide(sim_server, tmp_path, 0.20)
    assert report.winner == "fast" and report.tie == [], report.recommendation
    fast, slow = (record.levels[0] for record in report.variants)
    assert fast.output_tokens_per_s_ci is not None and slow.output_tokens_per_s_ci is not None
    # The intervals stand apart: the faster one's low end above the slower one's high end.
    assert fast.output_tokens_per_s_ci[0] > slow.output_tokens_per_s_ci[1]
    assert "higher output throughput at 4 than slow" in report.recommendation
