"""`opsctl tune`'s files: the table of points (tune.md) and the best point as a variant overlay
(best-variant.yaml) to paste under the profile's `variants:`."""

from __future__ import annotations

from pathlib import Path

import yaml

from opsctl.config.profiles import Deployment
from opsctl.core.files import atomic_write_text
from opsctl.tune.state import Measurement, TuneState

TUNE_MD = "tune.md"
BEST_VARIANT = "best-variant.yaml"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(state: TuneState) -> list[str]:
    lines = ["| point | rung | requests | status | TPOT p50 ms | TTFT p50 ms | tok/s | "
             "seconds | reason |", "|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for m in sorted(state.measurements, key=lambda m: (m.rung, m.key)):
        reason = (m.reason or "").replace("|", "/")[:160]
        lines.append(f"| `{m.key}` | {m.rung} | {m.requests} | {m.status} | "
                     f"{_ms(m.tpot_p50_ms)} | {_ms(m.ttft_p50_ms)} | "
                     f"{_ms(m.output_tokens_per_s)} | {m.total_s:.0f} | {reason} |")
    return lines


def overlay(state: TuneState, best: Measurement, deployment: Deployment) -> str:
    """The variant with the best point's settings over its server overlay, under a new name."""
    q = state.question
    base = deployment.profile.variants[q.variant]
    variant = base.model_dump(exclude_defaults=True)
    variant["description"] = (f"{q.variant} tuned by opsctl tune: {best.key} (TPOT p50 "
                              f"{_ms(best.tpot_p50_ms)} ms at concurrency {q.concurrency})")
    variant["server"] = {**base.server, **best.point}
    header = (f"# opsctl tune {best.at}: best of {len(state.measurements)} measurement(s) on "
              f"profile {q.profile}, variant {q.variant}.\n"
              f"# Paste under `variants:` in the profile; `opsctl profile show` checks it.\n")
    body = yaml.safe_dump({"variants": {f"{q.variant}-tuned": variant}}, sort_keys=False)
    return header + body


def markdown(state: TuneState, best: Measurement | None) -> str:
    q = state.question
    knobs = ", ".join(f"{name} in {values}" for name, values in q.knobs.items())
    lines = [f"# opsctl tune: {q.profile} / {q.variant}", "",
             f"- knobs: {knobs}",
             f"- concurrency {q.concurrency}, {q.requests} requests per full point, "
             f"{q.input_words} input words, {q.output_tokens} output tokens"
             + (f", {state.settings.request_timeout_s:g} s per request" if state.settings else ""),
             f"- search: {state.mode or 'not decided'}"
             + (f", budget {state.budget_s / 60:g} min" if state.budget_s else "")
             + f", {state.spent_s:.0f} s spent",
             f"- best: `{best.key}` (TPOT p50 {_ms(best.tpot_p50_ms)} ms)" if best else
             "- best: none (no point was measured successfully)"]
    if state.skipped:
        lines.append(f"- not measured, the budget was spent: {', '.join(state.skipped)}")
    return "\n".join([*lines, "", *table(state)]) + "\n"


def write(state: TuneState, best: Measurement | None, deployment: Deployment, out_dir: Path
          ) -> list[Path]:
    written = [atomic_write_text(out_dir / TUNE_MD, markdown(state, best))]
    if best is not None:
        written.append(atomic_write_text(out_dir / BEST_VARIANT,
                                         overlay(state, best, deployment)))
    return written
