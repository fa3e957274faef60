"""decide's verdict over what was measured: which pairs agree, which variant to run, and why.

Pure functions over the report (and, for ties, the per-request samples its levels were pooled
from): the pairwise greedy-output comparison (smoke's own compare, applied variant against
variant), the ranking rule (SLO goodput: the highest level meeting the SLO, then throughput
there), the tie rule (a throughput ratio under the margin, or whose bootstrap interval holds 1),
and the one recommendation line a user reads first.
"""

from __future__ import annotations

from opsctl.decide.bootstrap import little_throughput, ratio_interval
from opsctl.decide.figures import Samples
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


def accuracy_gate(report: DecideReport) -> None:
    """Disqualify each qualified variant whose GSM8K accuracy is more than the profile's
    max_accuracy_drop below the reference variant's (eval.reference, e.g. BF16 KV): agreement
    among FP8 variants cannot catch a misread they share, the reference can. Nothing is judged
    where the reference did not score (not run, or no GSM8K): the verdict then claims no such
    gate."""
    reference = _reference_score(report)
    if reference is None or report.max_accuracy_drop is None:
        return
    for record in report.variants:
        if record.variant == report.reference or record.status != "qualified":
            continue
        if record.accuracy is None:
            continue
        drop = reference - record.accuracy.accuracy
        if drop > report.max_accuracy_drop:
            record.status, record.failed_gate = "disqualified", "accuracy"
            record.reason = (f"GSM8K {record.accuracy.accuracy:.3f} is {drop:.3f} below "
                             f"{report.reference}'s {reference:.3f}, more than the profile's "
                             f"{report.max_accuracy_drop:.3f}")


def _reference_score(report: DecideReport) -> float | None:
    found = next((r for r in report.variants if r.variant == report.reference), None)
    return found.accuracy.accuracy if found is not None and found.accuracy else None


def ranked(records: list[VariantRecord]) -> list[tuple[VariantRecord, Level]]:
    """Qualified variants with a level that meets the SLO (free of failures, up to the first
    failure), best first: the highest such level, then the higher output throughput there,
    then the lower TPOT p50."""
    found = [(r, best) for r in records
             if r.status == "qualified" and (best := r.best_level()) is not None]

    def key(entry: tuple[VariantRecord, Level]) -> tuple[int, float, float]:
        level = entry[1]
        return (-level.concurrency, -(level.output_tokens_per_s or 0.0),
                level.tpot_p50_ms or 0.0)

    return sorted(found, key=key)


def recommend(report: DecideReport, samples: Samples | None = None
              ) -> tuple[str | None, list[str], str]:
    """(the winner or None, the tied variants, the recommendation line)."""
    if report.partial:
        ran = sum(r.status != "not run" for r in report.variants)
        return None, [], (f"interrupted after {ran} of {len(report.variants)} variant(s): "
                          "no recommendation")
    qualified = [r for r in report.variants if r.status == "qualified"]
    if not qualified:
        return None, [], "no variant qualified: " + "; ".join(
            f"{r.variant} ({r.failed_gate}: {r.reason})" for r in report.variants)
    order = ranked(report.variants)
    if not order:
        slo = " or met the SLO at none" if report.slo_ttft_ms or report.slo_tpot_ms else ""
        return None, [], (f"no variant qualified: {', '.join(r.variant for r in qualified)} "
                          f"passed every gate but failed requests at the first level of the "
                          f"sweep{slo}")
    winner, best = order[0]
    tied = _tied(report, order, samples or {})
    if tied is not None:
        names, line = tied
        return None, names, line
    gates = "start, verify, smoke" + (", GSM8K" if winner.accuracy else "") + _against_reference(
        report, winner) + (", long-context probes" if winner.probes else "")
    return winner.variant, [], (f"run {winner.variant}: correct on every gate ({gates})"
                                + _against(report, order) + _disputes(report, winner.variant))


def _against_reference(report: DecideReport, winner: VariantRecord) -> str:
    """The reference gate, named only where it ran for the winner."""
    reference = _reference_score(report)
    if reference is None or winner.accuracy is None or report.max_accuracy_drop is None:
        return ""
    if winner.variant == report.reference:
        return ", the accuracy reference itself"
    return f", within {report.max_accuracy_drop:.2f} of {report.reference}'s GSM8K"


def _criterion(report: DecideReport) -> str:
    return "meets the SLO" if report.slo_ttft_ms or report.slo_tpot_ms else \
        "is free of failures"


def throughput_ratio(a: str, b: str, concurrency: int, samples: Samples
                     ) -> tuple[float, float] | None:
    """95% interval of a's Little's-law throughput estimate over b's at `concurrency`, from
    their records (bootstrap.ratio_interval); None without records on either side."""
    first, second = samples.get((a, concurrency)), samples.get((b, concurrency))
    if not first or not second:
        return None
    return ratio_interval(first, second, little_throughput)


def _tied(report: DecideReport, order: list[tuple[VariantRecord, Level]], samples: Samples
          ) -> tuple[list[str], str] | None:
    """The variants the winner cannot be told apart from at its level, and the line saying so;
    None when it stands clear of every other."""
    (winner, best), others = order[0], order[1:]
    measured = best.output_tokens_per_s or 0.0
    tied: list[tuple[VariantRecord, Level, float, tuple[float, float] | None]] = []
    for other, theirs in others:
        if theirs.concurrency != best.concurrency or not theirs.output_tokens_per_s:
            continue
        ratio = measured / theirs.output_tokens_per_s
        spread = throughput_ratio(winner.variant, other.variant, best.concurrency, samples)
        # The interval is that of the Little's-law estimator; centred on the measured ratio.
        if spread is not None:
            whole = _whole_ratio(winner.variant, other.variant, best.concurrency, samples)
            spread = (ratio * spread[0] / whole, ratio * spread[1] / whole) if whole else None
        if ratio - 1.0 < report.margin or (spread is not None and spread[0] <= 1.0):
            tied.append((other, theirs, ratio, spread))
    if not tied:
        return None
    names = [winner.variant, *(other.variant for other, *_ in tied)]
    other, theirs, ratio, spread = tied[0]
    ci = f", 95% CI {spread[0]:.3f}-{spread[1]:.3f}" if spread else ""
    more = max(4, 2 * report.repeats)
    return names, (
        f"tie: {' and '.join(names)} at concurrency {best.concurrency}, the highest level each "
        f"{_criterion(report)}: {measured:.1f} vs {theirs.output_tokens_per_s or 0:.1f} output "
        f"tok/s (ratio {ratio:.3f}{ci}) is inside the {report.margin:.0%} margin or its "
        f"interval; to separate them: more repeats (--repeats {more}), more requests per level "
        f"(--requests), or a higher level (--concurrency ...,{2 * best.concurrency}) where one "
        "may stop meeting the SLO first")


def _whole_ratio(a: str, b: str, concurrency: int, samples: Samples) -> float | None:
    first, second = samples.get((a, concurrency)), samples.get((b, concurrency))
    if not first or not second:
        return None
    whole_a = little_throughput([(r, r.records) for r in first])
    whole_b = little_throughput([(r, r.records) for r in second])
    return whole_a / whole_b if whole_a and whole_b else None


def _ci(interval: tuple[float, float] | None, form: str) -> str:
    return "" if interval is None else f" [{form.format(interval[0])}-{form.format(interval[1])}]"


def _against(report: DecideReport, order: list[tuple[VariantRecord, Level]]) -> str:
    """How the winner beats the runner-up, at the winner's level."""
    best, others = order[0][1], order[1:]
    tput = best.output_tokens_per_s or 0.0
    tpot = best.tpot_p50_ms or 0.0
    if not others:
        alone = f" and the only one of {len(report.variants)} that was" \
            if len(report.variants) > 1 else ""
        return (f"{alone}; {tput:.0f}{_ci(best.output_tokens_per_s_ci, '{:.0f}')} output tok/s, "
                f"TPOT p50 {tpot:.1f} ms at concurrency {best.concurrency}")
    runner_up, theirs = others[0]  # ranked: its level is at most the winner's
    if theirs.concurrency < best.concurrency:
        return (f" and {_criterion(report).removeprefix('is ')} up to concurrency "
                f"{best.concurrency}, where {runner_up.variant} did only up to "
                f"{theirs.concurrency}")
    their_tput = theirs.output_tokens_per_s or 0.0
    higher = (tput - their_tput) / their_tput * 100 if their_tput else 0.0
    return (f" and {higher:.0f}% higher output throughput at {best.concurrency} than "
            f"{runner_up.variant} ({tput:.0f}{_ci(best.output_tokens_per_s_ci, '{:.0f}')} vs "
            f"{their_tput:.0f}{_ci(theirs.output_tokens_per_s_ci, '{:.0f}')} tok/s, 95% CI; "
            f"TPOT p50 {tpot:.1f} vs {theirs.tpot_p50_ms or 0:.1f} ms)")


def _disputes(report: DecideReport, winner: str) -> str:
    disputed = [p.b if p.a == winner else p.a for p in report.pairs
                if p.outcome == "disagree" and winner in (p.a, p.b)]
    if not disputed:
        return ""
    return (f"; note: its greedy outputs disagree with {', '.join(disputed)}'s "
            "(one of them is wrong: see decide.md)")
