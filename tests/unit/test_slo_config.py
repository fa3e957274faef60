"""The profile's SLO section and the pure functions smoke and bench read it with."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from opsctl.config.sloconfig import (
    Objective,
    Slo,
    check,
    goodput,
    quantile_value,
    request_is_good,
    share_within,
)

TPOT = Objective(quantile=0.5, threshold_ms=80, target=0.99, window="30d")


def test_an_objective_is_stated_once_with_defaults_for_target_and_window() -> None:
    slo = Slo.model_validate({"tpot": {"quantile": 0.9, "threshold_ms": 100}})
    assert slo.tpot == Objective(quantile=0.9, threshold_ms=100, target=0.99, window="30d")
    assert slo.tpot.threshold_seconds == 0.1 and slo.tpot.window_seconds == 30 * 86400
    assert slo.ttft is None


@pytest.mark.parametrize("bad", [
    {"tpot": {"quantile": 1.0, "threshold_ms": 80}},
    {"tpot": {"quantile": 0.5, "threshold_ms": 0}},
    {"tpot": {"quantile": 0.5, "threshold_ms": 80, "target": 1}},
    {"tpot": {"quantile": 0.5, "threshold_ms": 80, "window": "month"}},
    {"tpot": {"quantile": 0.5, "threshold_ms": 80, "p99": 1}},
    {"tpot_p50_ms": 80, "tpot": {"quantile": 0.5, "threshold_ms": 80}},
    {"latency": 1},
])
def test_a_bad_objective_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Slo.model_validate(bad)


def test_the_median_only_keys_are_gone() -> None:
    # 0.1.0 was never released: `tpot_p50_ms` was never a published syntax, so it is refused.
    with pytest.raises(ValidationError):
        Slo.model_validate({"tpot_p50_ms": 80})


def test_share_and_quantile_say_the_same_thing() -> None:
    values = [0.05, 0.07, 0.08, 0.09, 0.2]
    assert share_within(values, 0.08) == 0.6
    for quantile in (0.2, 0.5, 0.6, 0.61, 0.9):
        for threshold in (0.06, 0.08, 0.085, 0.3):
            value = quantile_value(values, quantile)
            assert value is not None
            assert (value <= threshold) == ((share_within(values, threshold) or 0) >= quantile)
    assert share_within([], 0.08) is None and quantile_value([], 0.5) is None


def test_a_run_meets_the_median_objective_only_when_half_its_requests_are_within() -> None:
    passed = check(TPOT, [0.07, 0.079, 0.08, 0.2])  # 3 of 4 at or under 80 ms
    assert passed.passed is True and passed.within_share == 0.75
    assert passed.observed_ms == pytest.approx(79.0)
    failed = check(TPOT, [0.07, 0.09, 0.1])
    assert failed.passed is False and failed.observed_ms == pytest.approx(90.0)
    nothing = check(TPOT, [])
    assert nothing.passed is None and nothing.observed_ms is None


def test_goodput_counts_requests_within_every_stated_threshold() -> None:
    slo = Slo(tpot=TPOT, ttft=Objective(quantile=0.5, threshold_ms=2000))
    requests = [(1.0, 0.07), (3.0, 0.07), (1.0, 0.1), (1.0, None), (2.0, 0.08)]
    assert [request_is_good(slo, *r) for r in requests] == [True, False, False, False, True]
    assert goodput(slo, requests, duration_s=2.0) == 1.0
    # Without a TTFT objective, TTFT does not matter.
    assert goodput(Slo(tpot=TPOT), requests, duration_s=1.0) == 3.0
    with pytest.raises(ValueError):
        goodput(slo, requests, duration_s=0)
