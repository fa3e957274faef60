"""The decide report: its JSON models and decide.md, the page a user reads to pick a variant.

decide.json is the record (every variant's gates, its sweep, the pairwise greedy comparisons and
the verdict); decide.md is the same run as tables with links to the per-variant evidence
(smoke report, bench report, verify result, the server's log), relative to the run directory. Both are
written afresh, atomically; a run stopped by Ctrl-C is still written, marked partial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from opsctl.core.files import atomic_write_text
from opsctl.core.partial import PartialReport
from opsctl.core.reports import DECIDE_JSON, DECIDE_MARKDOWN
from opsctl.traffic.evals.divergence import Divergence
from opsctl.traffic.evals.score import Score
from opsctl.traffic.markdown import fmt

SCHEMA_VERSION = 1

# Where each variant's evidence goes, under <run dir>/<NN>-<variant>/ (with the server's log,
# saved there by the deploy room under its own name before the container is removed).
SMOKE_FILE = "smoke.json"
VERIFY_FILE = "verify.json"
UP_ERROR_FILE = "up-error.txt"

Status = Literal["qualified", "disqualified", "interrupted", "not run"]
# Which gate disqualified a variant: it did not start, or resolved other settings than the
# profile says, or failed a smoke check (generations, SLO, GSM8K, long-context probes).
Gate = Literal["start", "verify", "smoke"]
PairOutcome = Literal["agree", "disagree", "not compared"]


class Level(BaseModel):
    concurrency: int
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    output_tokens_per_s: float | None
    failures: int  # measured and warm-up requests that failed
    aborted: str | None = None  # why the level stopped early
    # Tokens per speculative verify step, from the server's sglang:spec_accept_length (MTP only).
    accept_length: float | None = None

    @property
    def clean(self) -> bool:
        return self.failures == 0 and self.aborted is None and self.tpot_p50_ms is not None


class ResolvedField(BaseModel):
    """One setting: what the variant's release resolves for it (its `profile resolve` record, the
    variant's `expect`, or the release facts), beside what the running server's /server_info or
    /model_info said."""

    field: str
    expected: Any
    source: str  # where the expectation comes from
    served: Any
    status: str  # ok / mismatch / unknown, as verify judged it


class Probe(BaseModel):
    name: str
    passed: bool
    detail: str


class VariantRecord(BaseModel):
    variant: str
    description: str
    release: str  # the sglang release the variant pins
    image: str
    computes: str  # config.review.computes: what attention it runs on the model
    attention: str  # dense attention / sparse attention (or the whole line for another model)
    kv_cache_dtype: str | None  # as the variant sets it (None: the release's default)
    directory: str  # its evidence, relative to the run directory
    status: Status = "not run"
    failed_gate: Gate | None = None
    reason: str | None = None  # one line: why it is disqualified
    exit_code: int | None = None  # of a failed start: 4 launch, 6 daemon, 2 usage
    evidence: list[str] = []  # files that show it, relative to the run directory
    verify: str | None = None  # up's verdict: verified / MISMATCH: fields
    resolved: list[ResolvedField] = []  # verify's checks: the resolved expectation vs the server
    checkpoint: str | None = None  # the weights' combined sha256, or "unavailable: why"
    accuracy: Score | None = None  # GSM8K as smoke scored it (share correct, Wilson 95%)
    probes: list[Probe] = []
    smoke_report: str | None = None
    bench_report: str | None = None
    levels: list[Level] = []
    bench_note: str | None = None  # the sweep could not run, or stopped early

    def best_level(self) -> Level | None:
        """The highest level of the sweep reached without a failure: the levels in sweep order
        up to (not including) the first one with a failed request or an early stop."""
        best = None
        for level in self.levels:
            if not level.clean:
                break
            best = level
        return best

    def level(self, concurrency: int) -> Level | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


class Pair(BaseModel):
    """Two variants' greedy outputs on smoke's fixed prompts, or why they were not compared."""

    a: str
    b: str
    outcome: PairOutcome
    detail: str
    divergence: Divergence | None = None


class DecideReport(PartialReport):
    """decide.json (schema_version bumps on any incompatible change)."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["decide"] = "decide"
    started_at: str
    duration_s: float = 0.0
    profile: str
    concurrency: list[int]
    requests_per_level: int | None  # None: bench's default, max(16, 4 x concurrency)
    skip_eval: bool
    variants: list[VariantRecord]
    pairs: list[Pair] = []
    winner: str | None = None
    recommendation: str = ""


def write_report(report: DecideReport, out_dir: Path) -> list[Path]:
    return [
        atomic_write_text(out_dir / DECIDE_JSON, report.model_dump_json(indent=2) + "\n"),
        atomic_write_text(out_dir / DECIDE_MARKDOWN, markdown(report)),
    ]


def _link(path: str | None, text: str) -> str:
    return f"[{text}]({path})" if path else "-"


def _cell(text: str | None) -> str:
    return (text or "-").replace("|", "\\|").replace("\n", " ")


def _accuracy(record: VariantRecord) -> str:
    found = record.accuracy
    if found is None:
        return "-"
    return (f"{found.accuracy:.3f} (95% CI {found.ci95_low:.3f}-{found.ci95_high:.3f}, "
            f"threshold {found.threshold:g})")


def _probes(record: VariantRecord) -> str:
    return ", ".join(f"{p.name} {'pass' if p.passed else 'FAIL'}" for p in record.probes) or "-"


def _status(record: VariantRecord) -> str:
    if record.status == "disqualified":
        return f"DISQUALIFIED at {record.failed_gate}"
    return record.status


def markdown(report: DecideReport) -> str:
    lines = [f"# opsctl decide: {report.profile}", ""]
    if report.partial:
        lines += [f"**Partial run** ({report.partial_reason}): the variants after the one "
                  "that was running were not measured.", ""]
    lines += [f"**{report.recommendation}**", "",
              f"Started {report.started_at}, {report.duration_s:.0f} s; concurrency "
              f"{', '.join(map(str, report.concurrency))}; "
              f"{report.requests_per_level or 'max(16, 4 x concurrency)'} measured requests "
              "per level" + ("; evals skipped (--skip-eval)" if report.skip_eval else "") + ".",
              "", "Ranking: among variants that passed every gate (start, verify, smoke with the "
              "profile's evals), the highest concurrency reached without a failed request "
              "wins, then the lower TPOT p50 there, then the higher output throughput.", "",
              "## Variants", "",
              "| variant | status | sglang | computes | verify | checkpoint | GSM8K accuracy | "
              "probes | reports |", "|---|---|---|---|---|---|---|---|---|"]
    for r in report.variants:
        reports = " ".join(_link(path, name) for path, name in (
            (r.smoke_report, "smoke"), (r.bench_report, "bench")) if path) or "-"
        checkpoint = r.checkpoint[:12] if r.checkpoint and ":" not in r.checkpoint else r.checkpoint
        lines.append("| " + " | ".join(_cell(c) for c in (
            r.variant, _status(r), r.release, r.computes, r.verify, checkpoint, _accuracy(r),
            _probes(r), reports)) + " |")
    out = [r for r in report.variants if r.status == "disqualified"]
    if out:
        lines += ["", "### Disqualified", ""]
        lines += [f"- **{r.variant}** ({r.failed_gate}): {r.reason}; evidence: "
                  + ", ".join(_link(path, Path(path).name) for path in r.evidence)
                  for r in out]
    lines += _resolved_lines(report)
    lines += ["", "## Latency and throughput", "",
              "TPOT is per output token (a speculative step that yields three tokens counts "
              "three); accept length is the server's own `sglang:spec_accept_length` (MTP "
              "variants; `-` without speculation).", "",
              "| variant | concurrency | TPOT p50 (ms) | TPOT p90 (ms) | output tok/s | accept length "
              "| failures |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report.variants:
        for lv in r.levels:
            failures = str(lv.failures) + (f" ({lv.aborted})" if lv.aborted else "")
            lines.append(f"| {_cell(r.variant)} | {lv.concurrency} | {fmt(lv.tpot_p50_ms, '{:.2f}')} "
                         f"| {fmt(lv.tpot_p90_ms, '{:.2f}')} | "
                         f"{fmt(lv.output_tokens_per_s, '{:.1f}')} | "
                         f"{'-' if lv.accept_length is None else f'{lv.accept_length:.2f}'} | "
                         f"{_cell(failures)} |")
        if r.bench_note:
            lines.append(f"| {_cell(r.variant)} | - | - | - | - | - | {_cell(r.bench_note)} |")
    lines += ["", "## Greedy outputs, variant against variant", ""]
    lines += [f"- {p.a} vs {p.b}: **{p.outcome}**: {p.detail}" for p in report.pairs] or [
        "- fewer than two variants were smoked: nothing to compare"]
    lines += ["", "Variants that compute the same attention should give the same greedy "
              "outputs on smoke's fixed prompts; a disagreement disqualifies neither (one of "
              "them is wrong, and the eval decides which), it is evidence to read. Dense and "
              "sparse attention differ past index_topk tokens by design, so such pairs are "
              "not compared.", ""]
    return "\n".join(lines)


def _resolved_lines(report: DecideReport) -> list[str]:
    """Per variant, what its release resolves for each checked setting beside what the server
    said (verify's checks; the expectation's source names the record it came from)."""
    shown = [r for r in report.variants if r.resolved]
    if not shown:
        return []
    lines = ["", "## What sglang resolves, and what the server said", "",
             "Expected values come from the variant's `opsctl profile resolve` record (sglang's "
             "own resolution, run offline), its `expect`, or the release facts; the server's come "
             "from its /server_info and /model_info.", "",
             "| variant | setting | expected | from | server said | status |",
             "|---|---|---|---|---|---|"]
    for r in shown:
        lines += [f"| {_cell(r.variant)} | {_cell(f.field)} | {_cell(_value(f.expected))} | "
                  f"{_cell(f.source)} | {_cell(_value(f.served))} | {_cell(f.status)} |"
                  for f in r.resolved]
    return lines


def _value(value: Any) -> str:
    return "-" if value is None else str(value)
