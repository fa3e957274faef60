"""decide's bootstrap intervals: seeded, bounded, holding the figure, wider with run-to-run
wobble."""

from __future__ import annotations

import random

from opsctl.decide import bootstrap
from opsctl.decide.bootstrap import Repeat


def _repeat(tpot_s: float, count: int = 40, spread: float = 0.02, seed: int = 1) -> Repeat:
    rng = random.Random(seed)
    records = []
    for _ in range(count):
        tpot = tpot_s * (1 + rng.uniform(-spread, spread))
        records.append({"ok": True, "ttft_s": 0.05, "tpot_s": tpot, "e2e_s": 0.05 + 15 * tpot,
                        "output_tokens": 16})
    return Repeat(records, duration_s=1.0, concurrency=4)


def test_an_interval_is_seeded_and_holds_the_figure() -> None:
    repeats = [_repeat(0.02), _repeat(0.02, seed=2)]
    first = bootstrap.interval(repeats, bootstrap.tpot_p50)
    assert first == bootstrap.interval(repeats, bootstrap.tpot_p50)
    whole = bootstrap.tpot_p50([(r, r.records) for r in repeats])
    assert first is not None and whole is not None and first[0] <= whole <= first[1]
    assert bootstrap.interval([], bootstrap.tpot_p50) is None


def test_run_to_run_wobble_widens_the_interval() -> None:
    steady = [_repeat(0.02), _repeat(0.02, seed=2)]
    wobbly = [_repeat(0.02), _repeat(0.022, seed=2)]  # the second repeat 10% slower
    calm = bootstrap.interval(steady, bootstrap.tpot_p50)
    wide = bootstrap.interval(wobbly, bootstrap.tpot_p50)
    assert calm is not None and wide is not None
    assert wide[1] - wide[0] > 2 * (calm[1] - calm[0])


def test_resamples_are_bounded_by_the_records_drawn() -> None:
    assert bootstrap.resamples([_repeat(0.02, count=10)]) == bootstrap.RESAMPLES
    huge = Repeat([{"ok": True}] * 100_000, 1.0, 4)
    assert bootstrap.resamples([huge]) == bootstrap.MIN_RESAMPLES
    assert bootstrap.resamples([huge] * 100) == bootstrap.MIN_RESAMPLES


def test_a_ratio_interval_of_equal_variants_holds_one() -> None:
    a, b = [_repeat(0.02), _repeat(0.02, seed=3)], [_repeat(0.02, seed=4), _repeat(0.02, seed=5)]
    found = bootstrap.ratio_interval(a, b, bootstrap.little_throughput)
    assert found is not None and found[0] <= 1.0 <= found[1]
    faster = [_repeat(0.016, seed=6), _repeat(0.016, seed=7)]
    ahead = bootstrap.ratio_interval(faster, b, bootstrap.little_throughput)
    assert ahead is not None and ahead[0] > 1.1
