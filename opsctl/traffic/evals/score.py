"""Accuracy, its 95% Wilson score interval, and the threshold gate.

The Wilson interval (Wilson 1927) is used rather than the normal approximation because it stays
inside [0, 1] and is honest at the extremes: 200 questions all right still only bound the true
accuracy below by about 0.981, not by 1. The gate is deliberately the plain rule the profile
states (accuracy >= threshold); the interval is reported beside it so a reader can tell a real
regression from sampling noise on a small question count.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from opsctl.core.errors import UsageError

Z_95 = 1.959963984540054  # the standard normal's 97.5th percentile (two-sided 95%)


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """(low, high) of the Wilson score interval for ``successes`` out of ``trials``."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes}/{trials}")
    p = successes / trials
    z2 = z * z
    denominator = 1.0 + z2 / trials
    centre = (p + z2 / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / denominator
    # At 0 or all successes the bound is exactly 0 or 1; rounding would leave 1e-16 of it.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


class Score(BaseModel):
    """Counts over all questions asked; a request that failed counts as a wrong answer."""

    total: int
    correct: int
    invalid: int
    errors: int
    accuracy: float
    ci95_low: float
    ci95_high: float
    threshold: float
    passed: bool
    verdict: str


def check_threshold(threshold: float) -> float:
    if not 0.0 <= threshold <= 1.0 or math.isnan(threshold):
        raise UsageError(f"accuracy threshold {threshold} is not in [0, 1]",
                         hint="give it as a share, e.g. 0.9 for 90%")
    return threshold


def score(correct: int, invalid: int, errors: int, total: int, threshold: float) -> Score:
    """Accuracy = correct / total; pass when it reaches ``threshold`` and no request failed."""
    check_threshold(threshold)
    low, high = wilson_interval(correct, total)
    accuracy = correct / total
    passed = errors == 0 and accuracy >= threshold
    verdict = (f"accuracy {accuracy:.3f} ({correct}/{total}, 95% CI {low:.3f}-{high:.3f}) "
               f"{'>=' if accuracy >= threshold else '<'} threshold {threshold:g}")
    if invalid:
        verdict += f"; {invalid} answers had no number"
    if errors:
        verdict += f"; {errors} requests failed"
    return Score(total=total, correct=correct, invalid=invalid, errors=errors, accuracy=accuracy,
                 ci95_low=low, ci95_high=high, threshold=threshold, passed=passed,
                 verdict=verdict)
