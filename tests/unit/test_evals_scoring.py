"""Answer extraction (sglang's rule), the Wilson interval and the accuracy gate."""

from __future__ import annotations

import pytest

from opsctl.core.errors import EXIT_USAGE, UsageError
from opsctl.traffic.evals.extract import extract_answer
from opsctl.traffic.evals.score import score, wilson_interval


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("She has 3 + 4 = <<3+4=7>>7 apples.\n#### 7", 7),
        (" The total is 18, then 2 more: 20.", 20),  # the last integer wins
        ("It costs $1,234,567 in all.", 1234567),  # commas dropped before matching
        ("#### 72\n\n", 72),
        ("The answer is -3.", 3),  # no sign: sglang reads the digits only
        ("About 2.5 hours.", 5),  # no decimals either: the last run of digits
        ("Room 00", 0),  # all zeros is a valid literal
        ("The code is 05", None),  # a leading zero is not (literal_eval raises SyntaxError)
        ("I do not know.", None),
        ("", None),
        ("٣ apples", None),  # non-ASCII digits match \d but are no Python literal
    ],
)
def test_extract_answer_follows_sglang(text: str, expected: int | None) -> None:
    assert extract_answer(text) == expected


def test_wilson_interval_textbook_value_and_extremes() -> None:
    low, high = wilson_interval(5, 10)
    assert (round(low, 3), round(high, 3)) == (0.237, 0.763)
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(10, 10)[0] < 1.0  # all right still leaves room below
    low, high = wilson_interval(81, 100)
    mirror = wilson_interval(19, 100)
    assert low < 0.81 < high
    assert (round(low, 9), round(high, 9)) == (round(1 - mirror[1], 9), round(1 - mirror[0], 9))
    with pytest.raises(ValueError):
        wilson_interval(0, 0)


def test_gate_is_accuracy_at_or_above_threshold() -> None:
    at = score(correct=9, invalid=0, errors=0, total=10, threshold=0.9)
    assert at.passed and at.accuracy == 0.9
    assert ">= threshold 0.9" in at.verdict
    below = score(correct=8, invalid=1, errors=0, total=10, threshold=0.9)
    assert not below.passed
    assert "< threshold 0.9" in below.verdict and "1 answers had no number" in below.verdict
    assert below.ci95_low < 0.8 < below.ci95_high


def test_a_failed_request_fails_the_gate_even_above_threshold() -> None:
    result = score(correct=9, invalid=0, errors=1, total=10, threshold=0.5)
    assert not result.passed
    assert "1 requests failed" in result.verdict


@pytest.mark.parametrize("threshold", [-0.1, 1.5, float("nan")])
def test_threshold_outside_zero_one_is_a_usage_error(threshold: float) -> None:
    with pytest.raises(UsageError) as caught:
        score(correct=1, invalid=0, errors=0, total=1, threshold=threshold)
    assert caught.value.exit_code == EXIT_USAGE
