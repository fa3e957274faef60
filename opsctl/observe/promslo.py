"""The SLO rules: the profile's objectives (opsctl/config/sloconfig.py) as recording rules and
multi-window burn-rate alerts, with the same meaning smoke and bench give them.

An objective "`quantile` of requests within `threshold` in `target` of the time over `window`"
becomes, per variant and instance:

1. `instance_variant:sglang_<slo>_slo_within:ratio_rate<slice>`: the share of requests over the
   last slice whose latency is at or under the threshold (the histogram bucket whose edge is the
   threshold, over the count). Absent while no request finished: idle time is not judged.
2. `instance_variant:sglang_<slo>_slo_missed:slice_rate<slice>`: 1 when that share is under
   `quantile` (the slice misses the objective), else 0.
3. Burn-rate alerts on the missed share of time, `avg_over_time` of (2) over a short and a long
   window, against `factor x (1 - target)`; the factor spends a fixed share of the budget of
   `window` in the alert's period (RuleTiming.fast_burn / slow_burn).

Grouping keeps `instance` so that Alertmanager can inhibit them while that instance is down.
"""

from __future__ import annotations

from typing import Any

from opsctl.core.errors import ProfileError
from opsctl.observe.promexpr import (
    BurnWindow,
    RuleTiming,
    alert,
    human_seconds,
    indent,
    rate_sum,
    tpot_rate,
)
from opsctl.observe.promnames import SloRule, sglang

BY = "variant, instance"


def within_record(rule: SloRule, timing: RuleTiming) -> str:
    return f"instance_variant:sglang_{rule.name}_slo_within:ratio_rate{timing.slo_slice}"


def missed_record(rule: SloRule, timing: RuleTiming) -> str:
    return f"instance_variant:sglang_{rule.name}_slo_missed:slice_rate{timing.slo_slice}"


def _counts(rule: SloRule, window: str) -> tuple[str, str]:
    """(requests within the threshold, all requests) per second over `window`."""
    edge = f'le="{rule.le}"'
    if rule.name == "tpot":
        return (tpot_rate("_bucket", edge, BY, window, on=BY),
                tpot_rate("_count", "", BY, window, on=BY))
    histogram = "time_to_first_token_seconds"
    return (rate_sum(sglang(f"{histogram}_bucket", edge), BY, window),
            rate_sum(sglang(f"{histogram}_count"), BY, window))


def recording_rules(rules: tuple[SloRule, ...], timing: RuleTiming) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for rule in rules:
        good, total = _counts(rule, timing.slo_slice)
        out += [
            {"record": within_record(rule, timing),
             "expr": f"(\n{indent(good)}\n)\n/\n(\n  (\n{indent(total, 4)}\n  ) > 0\n)"},
            {"record": missed_record(rule, timing),
             "expr": f"{within_record(rule, timing)} < bool {rule.quantile:g}"},
        ]
    return out


def _pname(quantile: float) -> str:
    return f"p{quantile * 100:g}"


def _limit(rule: SloRule, window: BurnWindow) -> str:
    factor = window.factor(rule.window_seconds)
    budget = round(1.0 - rule.target, 6)
    if factor * budget >= 1.0:
        raise ProfileError(
            f"slo.{rule.name}: a target of {rule.target:g} over "
            f"{human_seconds(rule.window_seconds)} leaves a budget of {budget:g}, which a "
            f"{factor:g}x burn-rate alert can never exceed",
            hint="raise target (e.g. 0.99) or shorten window",
        )
    return f"{factor:g} * {budget:g}"


def _burn(rule: SloRule, timing: RuleTiming, window: BurnWindow, fast: bool) -> dict[str, Any]:
    record = missed_record(rule, timing)
    limit = _limit(rule, window)
    expr = (f"avg_over_time({record}[{window.short}]) > ({limit})\n"
            f"and\navg_over_time({record}[{window.long}]) > ({limit})")
    factor = window.factor(rule.window_seconds)
    q, threshold = _pname(rule.quantile), f"{rule.threshold_seconds * 1000:g} ms"
    objective = (f"{rule.label} {q} <= {threshold} in {rule.target * 100:g}% of the time over "
                 f"{human_seconds(rule.window_seconds)}")
    spent_in = human_seconds(round(rule.window_seconds / factor / 3600) * 3600)
    where = "variant {{ $labels.variant }} on {{ $labels.instance }}"
    summary = (f"{rule.label} {q} over {threshold} for {where}" if fast
               else f"{rule.label} {q} keeps going over {threshold} for {where}")
    name = f"Sglang{rule.name.capitalize()}Slo{'Fast' if fast else 'Slow'}Burn"
    return alert(
        name, expr, window.for_, "critical" if fast else "warning", summary,
        f"The {rule.label} {q} was over {threshold} in {{{{ $value | humanizePercentage }}}} of "
        f"the last {window.short} and in more than {factor:g}x the error budget of the last "
        f"{window.long}; at this rate the budget of the objective ({objective}) is gone in "
        f"about {spent_in}.",
        labels={"slo": rule.name},
    )


def alert_rules(rules: tuple[SloRule, ...], timing: RuleTiming) -> list[dict[str, Any]]:
    return [_burn(rule, timing, window, fast)
            for rule in rules
            for window, fast in ((timing.fast_burn, True), (timing.slow_burn, False))]
