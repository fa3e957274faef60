"""smoke's latency numbers: the streamed requests summed up, and the profile's SLO over them.

Pure functions over what the streaming stage measured, so the numbers and the verdict can be
read (and tested) without a server.
"""

from __future__ import annotations

from collections.abc import Sequence

from opsctl.config import sloconfig
from opsctl.core.redact import redact
from opsctl.traffic.bench.stats import itl_note, percentile
from opsctl.traffic.client import RequestResult
from opsctl.traffic.smoke_report import CheckStatus, ObjectiveRecord, SloRecord, StreamRecord


def stream_record(results: Sequence[RequestResult], max_tokens: int,
                  api_key: str | None) -> StreamRecord:
    """Per-request TTFT/TPOT of the successful streams, ITL pooled over all their gaps."""
    ok = [r for r in results if r.ok]
    gaps = [gap for r in ok for gap in r.itl_s]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [t for r in ok if (t := r.tpot_s) is not None]
    sources = sorted({r.token_source for r in ok})
    return StreamRecord(
        requests=len(results), ok=len(ok), max_tokens=max_tokens,
        ttft_s=ttfts, tpot_s=tpots, output_tokens=[r.output_tokens for r in ok],
        token_count_source="+".join(sources) or "none",
        ttft_p50_s=_percentile(ttfts, 50),
        tpot_p50_s=_percentile(tpots, 50),
        itl_p50_s=_percentile(gaps, 50),
        itl_p90_s=_percentile(gaps, 90),
        itl_note=itl_note(ok),
        errors=[redact(f"{r.error_kind}: {r.error}", api_key) for r in results if not r.ok],
    )


def _percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile; None for no values."""
    return percentile(values, q) if values else None


def stream_verdict(stream: StreamRecord) -> tuple[CheckStatus, str]:
    if stream.ok < stream.requests:
        return "fail", f"{stream.requests - stream.ok} of {stream.requests} streams failed: " + \
            "; ".join(stream.errors)
    return "pass", (
        f"{stream.ok} streams: TTFT p50 {ms(stream.ttft_p50_s)}, ITL p50 {ms(stream.itl_p50_s)}, "
        f"TPOT p50 {ms(stream.tpot_p50_s)} (tokens from {stream.token_count_source})"
        + (f"; ITL {stream.itl_note}" if stream.itl_note else "")
    )


def ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


def check_slo(slo: SloRecord, stream: StreamRecord | None,
              objectives: sloconfig.Slo | None = None) -> tuple[CheckStatus, str]:
    """The profile's objectives over this run (one slice of time, judged as the alerts judge
    one: at least `quantile` of the requests within the threshold). Records each objective with
    what was measured in ``slo``."""
    if objectives is None or not (objectives.tpot or objectives.ttft):
        return "skip", "no SLO objectives (the profile has none, or no profile given)"
    return _check_objectives(slo, stream, objectives)


def _check_objectives(slo: SloRecord, stream: StreamRecord | None,
                      objectives: sloconfig.Slo) -> tuple[CheckStatus, str]:
    if stream is None or stream.ok == 0:
        return "fail", "no streaming measurements to compare with the SLO"
    verdicts: list[str] = []
    failed = False
    for label, objective, values in (("TPOT", objectives.tpot, stream.tpot_s),
                                     ("TTFT", objectives.ttft, stream.ttft_s)):
        if objective is None:
            continue
        result = sloconfig.check(objective, values)
        name = f"{label} p{objective.quantile * 100:g}"
        setattr(slo, label.lower(), ObjectiveRecord(
            quantile=objective.quantile, threshold_ms=objective.threshold_ms,
            observed_ms=result.observed_ms, within_share=result.within_share))
        if result.passed is None or result.observed_ms is None or result.within_share is None:
            failed = True
            verdicts.append(f"{name}: not measured (limit {objective.threshold_ms:g} ms)")
            continue
        failed |= not result.passed
        verdicts.append(
            f"{name} {result.observed_ms:.1f} ms {'<=' if result.passed else '>'} "
            f"{objective.threshold_ms:g} ms ({result.within_share:.0%} of {len(values)} within)")
    return ("fail" if failed else "pass"), "; ".join(verdicts)
