"""decide's verdict over what was measured: which pairs agree, which variant to run, and why.

Pure functions over the report: the pairwise greedy-output comparison (smoke's own compare,
applied variant against variant), the ranking rule, and the one recommendation line a user
reads first.
"""

from __future__ import annotations

from opsctl.decide.report import DecideReport, Level, Pair, VariantRecord
from opsctl.traffic.smoke_report import SmokeReport, compare_generations


def compare_pairs(records: list[VariantRecord], smoked: dict[str, SmokeReport]) -> list[Pair]:
    """Every pair of smoked variants, in run order: greedy outputs compared when both compute
    the same attention on the same checkpoint, else why not."""
    done = [r for r in records if r.variant in smoked]
    return [_pair(a, b, smoked[a.variant], smoked[b.variant])
            for index, a in enumerate(done) for b in done[index + 1:]]


def _pair(a: VariantRecord, b: VariantRecord, first: SmokeReport, second: SmokeReport) -> Pair:
    if a.attention != b.attention:
        return Pair(a=a.variant, b=b.variant, outcome="not compared", detail=(
            f"{a.variant} computes {a.attention}, {b.variant} {b.attention}: they differ past "
            "index_topk tokens by design, so only the absolute gates judge them"))
    if a.checkpoint and b.checkpoint and a.checkpoint != b.checkpoint:
        return Pair(a=a.variant, b=b.variant, outcome="not compared", detail=(
            "they ran different checkpoints: their outputs are not expected to match"))
    status, detail, divergence = compare_generations(second.generations, first)
    if status == "pass":
        return Pair(a=a.variant, b=b.variant, outcome="agree", detail=detail)
    if divergence is None:  # different prompts or an output only one side has
        return Pair(a=a.variant, b=b.variant, outcome="not compared", detail=detail)
    where = (divergence.note if divergence.unit == "missing" else
             f"{divergence.unit.removesuffix('s')} {divergence.offset}: "
             f"{divergence.reference_excerpt!r} vs {divergence.current_excerpt!r}")
    why = "one of them is wrong" if a.kv_cache_dtype == b.kv_cache_dtype else (
        f"their KV caches differ ({a.kv_cache_dtype} vs {b.kv_cache_dtype}), so rounding alone "
        "may explain it")
    return Pair(a=a.variant, b=b.variant, outcome="disagree", divergence=divergence, detail=(
        f"{b.variant} and {a.variant} disagree at request {divergence.request_index} "
        f"({divergence.request_id}), {where}: {why}; the eval decides"))


def ranked(records: list[VariantRecord]) -> list[tuple[VariantRecord, Level]]:
    """Qualified variants with a level free of failures, best first: the highest such level,
    then the lower TPOT p50 there, then the higher output throughput there."""
    found = [(r, best) for r in records
             if r.status == "qualified" and (best := r.best_level()) is not None]

    def key(entry: tuple[VariantRecord, Level]) -> tuple[int, float, float]:
        level = entry[1]
        return (-level.concurrency, level.tpot_p50_ms or 0.0, -(level.output_tokens_per_s or 0.0))

    return sorted(found, key=key)


def recommend(report: DecideReport) -> tuple[str | None, str]:
    """(the winner or None, the recommendation line)."""
    if report.partial:
        ran = sum(r.status != "not run" for r in report.variants)
        return None, (f"interrupted after {ran} of {len(report.variants)} variant(s): "
                      "no recommendation")
    qualified = [r for r in report.variants if r.status == "qualified"]
    if not qualified:
        return None, "no variant qualified: " + "; ".join(
            f"{r.variant} ({r.failed_gate}: {r.reason})" for r in report.variants)
    order = ranked(report.variants)
    if not order:
        return None, (f"no variant qualified: {', '.join(r.variant for r in qualified)} passed "
                      "every gate but failed requests at the first level of the sweep")
    winner, best = order[0]
    gates = "start, verify, smoke" + (", GSM8K" if winner.accuracy else "") + (
        ", long-context probes" if winner.probes else "")
    return winner.variant, (f"run {winner.variant}: correct on every gate ({gates})"
                            + _against(report, order) + _disputes(report, winner.variant))


def _against(report: DecideReport, order: list[tuple[VariantRecord, Level]]) -> str:
    """How the winner beats the runner-up, at the winner's level."""
    best, others = order[0][1], order[1:]
    tpot = best.tpot_p50_ms or 0.0
    if not others:
        alone = f" and the only one of {len(report.variants)} that was" \
            if len(report.variants) > 1 else ""
        return f"{alone}; TPOT p50 {tpot:.1f} ms at concurrency {best.concurrency}"
    runner_up, theirs = others[0]  # ranked: its level is at most the winner's
    if theirs.concurrency < best.concurrency:
        return (f" and free of failures up to concurrency {best.concurrency}, where "
                f"{runner_up.variant} was free of them only up to {theirs.concurrency}")
    their_tpot = theirs.tpot_p50_ms or 0.0
    lower = (their_tpot - tpot) / their_tpot * 100 if their_tpot else 0.0
    return (f" and {lower:.0f}% lower TPOT p50 at {best.concurrency} than {runner_up.variant} "
            f"({tpot:.1f} vs {their_tpot:.1f} ms; {best.output_tokens_per_s or 0:.0f} vs "
            f"{theirs.output_tokens_per_s or 0:.0f} output tok/s)")


def _disputes(report: DecideReport, winner: str) -> str:
    disputed = [p.b if p.a == winner else p.a for p in report.pairs
                if p.outcome == "disagree" and winner in (p.a, p.b)]
    if not disputed:
        return ""
    return (f"; note: its greedy outputs disagree with {', '.join(disputed)}'s "
            "(one of them is wrong: see decide.md)")
