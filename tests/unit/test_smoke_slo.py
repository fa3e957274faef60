"""smoke judges the profile's SLO as the alerts and bench's goodput do (deploy/sloconfig.py)."""

from __future__ import annotations

from opsctl.config.sloconfig import Objective, Slo
from opsctl.traffic.smoke_latency import check_slo
from opsctl.traffic.smoke_report import SloRecord, StreamRecord


def _stream(tpot_s: list[float], ttft_s: list[float]) -> StreamRecord:
    return StreamRecord(requests=len(tpot_s), ok=len(tpot_s), max_tokens=64, ttft_s=ttft_s,
                        tpot_s=tpot_s, output_tokens=[64] * len(tpot_s), token_count_source="usage")


def test_the_quantile_of_the_objective_decides() -> None:
    stream = _stream([0.070, 0.075, 0.090], [0.5, 0.5, 0.5])
    median = Slo(tpot=Objective(quantile=0.5, threshold_ms=80))
    status, detail = check_slo(SloRecord(), stream, median)
    assert status == "pass" and "TPOT p50" in detail and "67% of 3 within" in detail
    p90 = Slo(tpot=Objective(quantile=0.9, threshold_ms=80))
    record = SloRecord()
    status, detail = check_slo(record, stream, p90)
    assert status == "fail" and "TPOT p90 90.0 ms > 80 ms" in detail
    # The record keeps the objective's own quantile: a p90 is never filed as a median.
    assert record.tpot is not None
    assert (record.tpot.quantile, record.tpot.threshold_ms, record.tpot.observed_ms) == (
        0.9,
        80,
        90.0,
    )
    assert record.ttft is None


def test_no_measurements_fail_and_no_objectives_skip() -> None:
    objectives = Slo(ttft=Objective(quantile=0.5, threshold_ms=600))
    assert check_slo(SloRecord(), None, objectives)[0] == "fail"
    stream = _stream([0.07], [0.1]).model_copy(update={"tpot_p50_s": 0.07})
    assert check_slo(SloRecord(), stream, None)[0] == "skip"
    assert check_slo(SloRecord(), stream, Slo())[0] == "skip"
