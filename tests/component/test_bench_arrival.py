"""Arrival modes, SLO goodput and the bench_serving-shaped JSONL, against the simulator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import OpsctlRunner, SimServer

from opsctl.config.sloconfig import Slo
from opsctl.traffic.bench.arrival import Arrival, Batch, drive, poisson_gaps
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.serving import write_report_files
from opsctl.traffic.bench.stats import goodput
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.client import RequestResult
from opsctl.traffic.settings import BenchSettings

StartSim = Callable[..., SimServer]
FAST = {"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "2"}
# Keys sglang 0.5.23's benchmark/serving.py writes that opsctl fills for every level.
SGLANG_KEYS = {
    "dataset_name", "request_rate", "max_concurrency", "duration", "completed",
    "total_output_tokens", "request_throughput", "output_throughput", "total_input_tokens",
    "input_throughput", "total_throughput", "concurrency",
    *(f"{stat}_{stem}_ms" for stat in ("mean", "median", "std", "p90", "p95", "p99")
      for stem in ("ttft", "tpot", "itl", "e2e_latency")),
}


def sim(start: StartSim, **env: str) -> str:
    return start(env={**FAST, **env}, args=["--served-model-name", "glm-5"]).url


def test_poisson_gaps_are_seeded_and_average_one_over_rate() -> None:
    first = [g for g, _ in zip(poisson_gaps(8.0, 3), range(2000), strict=False)]
    again = [g for g, _ in zip(poisson_gaps(8.0, 3), range(2000), strict=False)]
    other = [g for g, _ in zip(poisson_gaps(8.0, 4), range(2000), strict=False)]
    assert first == again and first != other
    assert sum(first) / len(first) == pytest.approx(1 / 8.0, rel=0.1)


def test_poisson_respects_the_concurrency_cap_and_sends_every_index() -> None:
    peak = 0
    batch = Batch()

    async def send(index: int) -> RequestResult:
        nonlocal peak
        peak = max(peak, batch.in_flight)
        await asyncio.sleep(0.02)
        return RequestResult(ok=True)

    asyncio.run(drive(send, range(20), 3, Arrival(rate=1000.0, seed=1), batch))
    assert (batch.sent, len(batch.results)) == (20, 20)
    assert peak == 3  # arrivals far faster than answers: the cap, not the rate, binds


def test_duration_stops_sending_and_awaits_what_was_sent() -> None:
    now = [0.0]
    batch = Batch()

    async def send(index: int) -> RequestResult:
        now[0] += 1.0  # each request takes one second of the fake clock
        return RequestResult(ok=True)

    asyncio.run(drive(send, range(1000), 2, Arrival(duration_s=5.0), batch,
                      clock=lambda: now[0]))
    assert 5 <= batch.sent <= 6 and len(batch.results) == batch.sent


def test_goodput_counts_requests_meeting_both_limits_over_all_sent() -> None:
    slo = Slo.model_validate({"ttft": {"quantile": 0.5, "threshold_ms": 100},
                              "tpot": {"quantile": 0.5, "threshold_ms": 20}})
    good = RequestResult(ok=True, ttft_s=0.05, e2e_s=0.05 + 9 * 0.01, output_tokens=10,
                         itl_s=[0.01] * 9)
    slow = RequestResult(ok=True, ttft_s=0.5, e2e_s=0.5 + 9 * 0.01, output_tokens=10,
                         itl_s=[0.01] * 9)
    failed = RequestResult(ok=False, error_kind="timeout")
    result = goodput(slo, [good, good, slow, failed], duration_s=2.0)
    assert (result.good, result.share, result.rate_per_s) == (2, 0.5, 1.0)
    assert (result.ttft_ms, result.tpot_ms) == (100, 20)


def test_request_rate_run_writes_figures_goodput_and_bench_serving_jsonl(
        sim_server: StartSim, tmp_path: Path) -> None:
    slo = Slo.model_validate({"ttft": {"quantile": 0.5, "threshold_ms": 600},
                              "tpot": {"quantile": 0.5, "threshold_ms": 60}})
    options = BenchOptions(BenchSettings(concurrency=(16,), requests_per_level=32,
                                         input_words=16, output_tokens=8, request_timeout_s=10.0,
                                         request_rate=8.0), arrival_seed=0, slo=slo)
    report = run_bench([Target("sim", sim(sim_server))], options)
    assert report.passed, report.model_dump_json()
    level = report.variants[0].levels[0]
    for pcts in (level.ttft_ms, level.itl_ms, level.tpot_ms, level.e2e_ms):
        assert None not in (pcts.p95, pcts.std, pcts.max)
        assert pcts.p50 <= pcts.p95 <= pcts.p99 <= pcts.max  # type: ignore[operator]
    # 32 arrivals at 8/s take about 4 s: a closed loop of 16 would finish far sooner.
    assert level.duration_s > 2.0
    assert level.goodput is not None and level.goodput.good == 32 and level.goodput.share == 1.0
    write_report_files(report, tmp_path)
    rows = [
        json.loads(line) for line in (tmp_path / "bench_serving.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 1
    row = rows[0]
    assert set(row) >= SGLANG_KEYS
    assert (row["completed"], row["max_concurrency"], row["request_rate"]) == (32, 16, 8.0)
    assert row["median_ttft_ms"] == level.ttft_ms.p50 and row["p95_tpot_ms"] == level.tpot_ms.p95
    assert row["slo_attainment"] == 1.0 and row["goodput_slos_ms"] == {"ttft": 600, "tpot": 60}
    assert report.config.arrival.startswith("Poisson arrivals at 8 req/s")


def test_cli_request_rate_with_the_profile_slo(sim_server: StartSim, opsctl: OpsctlRunner,
                                               tmp_path: Path) -> None:
    out = tmp_path / "bench"
    done = opsctl("bench", "--profile", "sim", "--base-url", f"sim={sim(sim_server)}",
                  "--request-rate", "8", "--concurrency", "16", "--requests", "32",
                  "--input-words", "16", "--output-tokens", "8", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    level = json.loads((out / "bench.json").read_text())["variants"][0]["levels"][0]
    assert level["goodput"]["ttft_ms"] == 600 and level["goodput"]["tpot_ms"] == 60
    assert {"p95", "std", "max"} <= set(level["tpot_ms"])
    assert "TPOT p95 (ms)" in (out / "bench.md").read_text()
    assert (out / "bench_serving.jsonl").read_text().count("\n") == 1


def test_cli_goodput_thresholds_without_a_profile(sim_server: StartSim, opsctl: OpsctlRunner,
                                                  tmp_path: Path) -> None:
    out = tmp_path / "bench"
    common = ("bench", "--base-url", f"sim={sim(sim_server)}", "--concurrency", "4",
              "--requests", "8", "--input-words", "16", "--output-tokens", "8")
    done = opsctl(*common, "--goodput", "ttft:600", "--goodput", "tpot:60", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    level = json.loads((out / "bench.json").read_text())["variants"][0]["levels"][0]
    assert level["goodput"]["ttft_ms"] == 600 and level["goodput"]["tpot_ms"] == 60
    assert level["goodput"]["good"] == 8
    for bad in ("ttft", "ttft:0", "e2e:100", "tpot:nan"):
        refused = opsctl(*common, "--goodput", bad, "--out", str(tmp_path / "no"))
        assert refused.returncode == 2 and "--goodput" in refused.stderr, refused.stderr
    assert not (tmp_path / "no").exists()


def test_duration_mode_against_the_simulator(sim_server: StartSim) -> None:
    options = BenchOptions(BenchSettings(concurrency=(2,), input_words=8, output_tokens=4,
                                         request_timeout_s=10.0, duration_s=1.0))
    report = run_bench([Target("sim", sim(sim_server))], options)
    level = report.variants[0].levels[0]
    assert report.passed and level.requests == level.completed > 2
    assert 1.0 <= level.duration_s < 5.0



def test_client_cpu_is_recorded_and_a_busy_client_is_flagged() -> None:
    from opsctl.traffic.bench.stats import summarize, with_client_cpu

    level = summarize(1, [], [], duration_s=1.0)
    assert with_client_cpu(level, 0.2, 1.0).client_bound is False
    busy = with_client_cpu(level, 0.95, 1.0)
    assert busy.client_bound and busy.client_cpu_share == 0.95
