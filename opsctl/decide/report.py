"""The decide report: its JSON models and decide.md, the page a user reads to pick a variant.

decide.json is the record (every variant's gates, its sweep, the pairwise greedy comparisons and
the verdict); decide.md is the same run as tables with links to the per-variant evidence
(smoke report, bench report, verify result, the server's log), relative to the run directory. Both
are written afresh, atomically; a run stopped by Ctrl-C is still written, marked partial.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from opsctl.core.errors import UsageError
from opsctl.core.files import atomic_write_text, read_bounded
from opsctl.core.partial import PartialReport
from opsctl.core.reports import DECIDE_JSON, DECIDE_MARKDOWN
from opsctl.decide.settings import DECIDE_DEFAULTS, DecideSettings
from opsctl.traffic.bench.markdown import fmt
from opsctl.traffic.evals.divergence import Divergence
from opsctl.traffic.evals.score import Score

# 2: --repeats: per-variant `runs` (one per repeat), levels pooled over them with bootstrap 95%
# intervals and SLO goodput, `repeats`/`margin`/`slo_*`/`tie` at the top. Additive since: the
# run's `settings` (DecideSettings).
SCHEMA_VERSION: Literal[2] = 2

# Where each variant's evidence goes, under <run dir>/<NN>-<variant>/ (with the server's log,
# saved there by the deploy room under its own name before the container is removed).
SMOKE_FILE = "smoke.json"
VERIFY_FILE = "verify.json"
UP_ERROR_FILE = "up-error.txt"

Status = Literal["qualified", "disqualified", "interrupted", "not run"]
# Which gate disqualified a variant: it did not start, or resolved other settings than the
# profile says, or failed a smoke check (generations, SLO, GSM8K, long-context probes).
Gate = Literal["start", "verify", "smoke", "accuracy"]
PairOutcome = Literal["agree", "disagree", "not compared"]


class Level(BaseModel):
    """One concurrency level: of one repeat (a run's), or pooled over every repeat (the
    variant's), then with bootstrap 95% intervals from the per-request records
    (opsctl.decide.bootstrap)."""

    concurrency: int
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    output_tokens_per_s: float | None  # pooled: the mean over repeats
    input_tokens_per_s: float | None = None  # server-counted prompt tokens; pooled: the mean
    failures: int  # measured and warm-up requests that failed (pooled: over every repeat)
    aborted: str | None = None  # why the level stopped early
    # Tokens per speculative verify step, from the server's sglang:spec_accept_length (MTP only).
    accept_length: float | None = None
    repeats: int = 1  # how many repeats the pooled figures hold
    requests: int = 0  # measured requests with a record, over those repeats
    tpot_p50_ci_ms: tuple[float, float] | None = None
    output_tokens_per_s_ci: tuple[float, float] | None = None
    # SLO goodput: requests meeting every limit of the profile's SLO per second (mean over
    # repeats), and whether the level meets the SLO (each objective's quantile within its
    # threshold over the pooled requests); None: the profile states no SLO.
    goodput_per_s: float | None = None
    goodput_ci: tuple[float, float] | None = None
    meets_slo: bool | None = None
    note: str | None = None  # e.g. requests files missing or truncated

    @property
    def clean(self) -> bool:
        return self.failures == 0 and self.aborted is None and self.tpot_p50_ms is not None

    @property
    def good(self) -> bool:
        """Clean, and meeting the SLO where the profile states one."""
        return self.clean and self.meets_slo is not False


class RunRecord(BaseModel):
    """One repeat of a variant's sweep: its bench report and its levels as measured."""

    repeat: int
    bench_report: str | None = None
    levels: list[Level] = []
    note: str | None = None


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
    levels: list[Level] = []  # pooled over `runs`
    runs: list[RunRecord] = []  # one per repeat, in the order they ran
    bench_note: str | None = None  # the sweep could not run, or stopped early

    def best_level(self) -> Level | None:
        """The highest level of the sweep that meets the SLO (every level without an SLO),
        among the levels in sweep order up to (not including) the first one with a failed
        request or an early stop."""
        best = None
        for level in self.levels:
            if not level.clean:
                break
            if level.good:
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

    schema_version: Literal[2] = SCHEMA_VERSION  # a report of another version is refused
    kind: Literal["decide"] = "decide"
    started_at: str
    duration_s: float = 0.0
    profile: str
    concurrency: list[int]
    requests_per_level: int | None  # None: bench's default, max(16, 4 x concurrency)
    skip_eval: bool
    repeats: int = 1  # sweeps per variant, interleaved (A B A B ...)
    margin: float = DECIDE_DEFAULTS.margin  # relative throughput difference under which two tie
    slo_ttft_ms: float | None = None  # the profile's SLO the ranking judged by
    slo_tpot_ms: float | None = None
    # The profile's eval.reference and how far below its GSM8K accuracy a variant may score.
    reference: str | None = None
    max_accuracy_drop: float | None = None
    variants: list[VariantRecord]
    pairs: list[Pair] = []
    winner: str | None = None
    tie: list[str] = []  # the variants that could not be told apart (winner is then None)
    recommendation: str = ""
    # What the run was asked (decide's settings, defaults filled in); absent in runs before it.
    # A rescore keeps it and records the margin it judged by in `margin`.
    settings: DecideSettings | None = None
    # Containers this run could not remove (a lost daemon, a full disk), each with the command
    # that removes it.
    left_behind: list[str] = []


# Draws the cross-variant chart of a run into its directory under the given file name; returns
# the file, or None when nothing was drawn (no level measured, or no matplotlib).
ChartWriter = Callable[["DecideReport", Path, str], Path | None]


def write_report(report: DecideReport, out_dir: Path, names: tuple[str, str] = (
        DECIDE_JSON, DECIDE_MARKDOWN), chart: ChartWriter | None = None) -> list[Path]:
    """decide.json and decide.md, and with `chart` the comparison chart decide.md embeds
    (named as the markdown, .png: decide.png, decide-rescored.png)."""
    drawn = chart(report, out_dir, Path(names[1]).with_suffix(".png").name) if chart else None
    return [
        atomic_write_text(out_dir / names[0], report.model_dump_json(indent=2) + "\n"),
        atomic_write_text(out_dir / names[1], markdown(report, drawn.name if drawn else None)),
        *([drawn] if drawn else []),
    ]


MAX_REPORT_BYTES = 64 << 20


def load_report(directory: Path) -> DecideReport:
    """decide.json of a decide run's directory; UsageError (one line) when it is none."""
    path = directory / DECIDE_JSON
    try:
        data = read_bounded(path, "decide report", MAX_REPORT_BYTES)
    except OSError as exc:
        raise UsageError(f"decide report {path}: {exc.strerror or exc}",
                         hint="pass the directory a decide run wrote") from None
    try:
        return DecideReport.model_validate_json(data)
    except ValueError:
        raise UsageError(f"{path}: not a decide report of schema_version {SCHEMA_VERSION}",
                         hint="re-scoring needs a run with per-request records "
                              "(decide.json schema_version 2)") from None


def _within_variant(path: str) -> str:
    """An evidence file's label: its path inside the variant's folder (repeat-2/verify.json
    apart from the first repeat's verify.json)."""
    parts = Path(path).parts
    return str(Path(*parts[1:])) if len(parts) > 1 else path


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


def markdown(report: DecideReport, chart: str | None = None) -> str:
    """decide.md; `chart`: the comparison chart's file name beside it, embedded."""
    lines = _head_lines(report)
    lines += _variant_lines(report)
    lines += _disqualified_lines(report)
    lines += _resolved_lines(report)
    lines += _latency_lines(report, chart)
    lines += _runs_lines(report)
    lines += _pairs_lines(report)
    return "\n".join(lines)


def _head_lines(report: DecideReport) -> list[str]:
    """The title, what was left behind or cut short, the verdict and how it was reached."""
    lines = [f"# opsctl decide: {report.profile}", ""]
    if report.left_behind:
        lines += ["**Left behind** (this run could not remove them):", "",
                  *[f"- {line}" for line in report.left_behind], ""]
    if report.partial:
        lines += [f"**Partial run** ({report.partial_reason}): the variants after the one "
                  "that was running were not measured.", ""]
    return lines + [
        f"**{report.recommendation}**", "",
        f"Started {report.started_at}, {report.duration_s:.0f} s; concurrency "
        f"{', '.join(map(str, report.concurrency))}; "
        f"{report.requests_per_level or 'max(16, 4 x concurrency)'} measured requests "
        "per level" + ("; evals skipped (--skip-eval)" if report.skip_eval else "") + ".",
        *_workload(report.settings), *_reference(report),
        "", "Ranking by SLO goodput: among variants that passed every gate (start, verify, "
        "smoke with the profile's evals), the highest concurrency that meets the "
        f"profile's SLO ({_slo(report)}) without a failed request wins, then the higher "
        "output throughput there. Each variant was swept "
        f"{report.repeats} time(s), interleaved with the others (A B A B ...); figures "
        "are pooled over the repeats, [low-high] is the bootstrap 95% interval from "
        "the per-request records. Throughputs within "
        f"{report.margin:.0%} of each other, or whose ratio's interval holds 1, are a "
        "tie.", "",
    ]


def _variant_lines(report: DecideReport) -> list[str]:
    """The variants' table: each one's status, release, gates and reports."""
    lines = [
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
    return lines


def _disqualified_lines(report: DecideReport) -> list[str]:
    """Each disqualified variant: the gate it failed, why, and the evidence."""
    out = [r for r in report.variants if r.status == "disqualified"]
    if not out:
        return []
    return ["", "### Disqualified", ""] + [
        f"- **{r.variant}** ({r.failed_gate}): {r.reason}; evidence: "
        + ", ".join(_link(path, _within_variant(path)) for path in r.evidence)
        for r in out]


def _latency_lines(report: DecideReport, chart: str | None) -> list[str]:
    """The chart, if drawn, and every variant's pooled levels."""
    lines = ["", "## Latency and throughput", ""]
    if chart:
        lines += [f"![every variant's pooled levels: TPOT, output tokens/s, and throughput "
                  f"against interactivity]({chart})", "",
                  "The chart: each variant's levels pooled over its repeats, bars the bootstrap "
                  "95% intervals, the SLO's limit dashed, each variant's best level (the one "
                  "the ranking reads) ringed. Each variant's folder holds its own bench charts "
                  "(TPOT and TTFT with their p90-p99 band, and the per-GPU Pareto).", ""]
    lines += [
        "TPOT is per output token (a speculative step that yields three tokens counts "
        "three); accept length is the server's own `sglang:spec_accept_length` (MTP "
        "variants; `-` without speculation).",
        "",
        "| variant | concurrency | repeats | requests | TPOT p50 (ms) [95% CI] | TPOT p90 (ms) "
        "| input tok/s | output tok/s [95% CI] | SLO goodput req/s [95% CI] | meets SLO "
        "| accept length | failures |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in report.variants:
        lines += [_level_line(r, lv) for lv in r.levels]
        if r.bench_note:
            lines.append(f"| {_cell(r.variant)} | - | - | - | - | - | - | - | - | - | - | "
                         f"{_cell(r.bench_note)} |")
    return lines


def _level_line(r: VariantRecord, lv: Level) -> str:
    """One pooled level's row of the latency table."""
    failures = str(lv.failures) + (f" ({lv.aborted})" if lv.aborted else "")
    if lv.note:
        failures += f"; {lv.note}"
    meets = "-" if lv.meets_slo is None else ("yes" if lv.meets_slo else "no")
    return (f"| {_cell(r.variant)} | {lv.concurrency} | {lv.repeats} | "
            f"{lv.requests} | {_with_ci(lv.tpot_p50_ms, lv.tpot_p50_ci_ms, '{:.2f}')} "
            f"| {fmt(lv.tpot_p90_ms, '{:.2f}')} | "
            f"{fmt(lv.input_tokens_per_s, '{:.1f}')} | "
            f"{_with_ci(lv.output_tokens_per_s, lv.output_tokens_per_s_ci, '{:.1f}')}"
            f" | {_with_ci(lv.goodput_per_s, lv.goodput_ci, '{:.3f}')} | {meets} | "
            f"{'-' if lv.accept_length is None else f'{lv.accept_length:.2f}'} | "
            f"{_cell(failures)} |")


def _pairs_lines(report: DecideReport) -> list[str]:
    """The greedy outputs' comparisons, pair by pair, and how to read them."""
    compared = [f"- {p.a} vs {p.b}: **{p.outcome}**: {p.detail}" for p in report.pairs]
    lines = ["", "## Greedy outputs, variant against variant", ""]
    lines += compared or ["- fewer than two variants were smoked: nothing to compare"]
    lines += ["", "Variants that compute the same attention should give the same greedy "
              "outputs on smoke's fixed prompts; a disagreement disqualifies neither (one of "
              "them is wrong, and the eval decides which), it is evidence to read. Dense and "
              "sparse attention differ past index_topk tokens by design, so such pairs are "
              "not compared.", ""]
    return lines


def _reference(report: DecideReport) -> list[str]:
    """Which variant's GSM8K accuracy the others were held against, or why none was."""
    if report.reference is None or report.skip_eval:
        return []
    found = next((r for r in report.variants if r.variant == report.reference), None)
    if found is None or found.accuracy is None:
        why = "did not run" if found is None or found.status == "not run" else "has no GSM8K score"
        return ["", f"Accuracy reference: {report.reference} {why}, so no variant was held "
                "against it (add it to --variants)."]
    return ["", f"Accuracy reference: {report.reference}, GSM8K "
            f"{found.accuracy.accuracy:.3f}; a variant more than "
            f"{report.max_accuracy_drop or 0:.2f} below it is disqualified (gate `accuracy`)."]


def _workload(settings: DecideSettings | None) -> list[str]:
    """The workload the verdict was judged on, as the sweeps were asked to send it (each
    variant's bench.json `config` says what was sent, e.g. words where no tokenizer was
    found)."""
    if settings is None:
        return []
    named = settings.dataset or "random (token-exact with a tokenizer, else words)"
    lengths = (f"{settings.input_words} prompt words or tokens, {settings.output_tokens} output "
               "tokens" if settings.dataset in (None, "random", "words",
                                                "generated-shared-prefix")
               else f"lengths from {settings.dataset_path}")
    if settings.length_pairs:
        shapes = ", ".join(f"{prompt}:{answer}" for prompt, answer in settings.length_pairs)
        count = len(settings.length_pairs)
        lengths = f"ISL:OSL pairs {shapes} (request i takes pair i mod {count})"
    parts = [f"dataset {named}", lengths, f"api {settings.api}"]
    if settings.dataset == "generated-shared-prefix":
        parts.append(f"{settings.gsp_groups} groups x {settings.gsp_prompts_per_group} prompts "
                     f"sharing {settings.gsp_prefix_len}-token prefixes")
    if settings.range_ratio < 1:
        parts.append(f"lengths drawn from [length x {settings.range_ratio:g}, length]")
    if settings.multi_turn > 1:
        parts.append(f"{settings.multi_turn}-turn chat sessions")
    if settings.extra_request_body:
        parts.append("extra request body " + json.dumps(settings.extra_request_body))
    if settings.quick:
        parts.append("--quick")
    return ["", "Workload: " + "; ".join(parts) + f" (seed {settings.seed})."]


def _slo(report: DecideReport) -> str:
    stated = [f"{name} {ms:g} ms" for name, ms in (("TTFT", report.slo_ttft_ms),
                                                  ("TPOT", report.slo_tpot_ms)) if ms]
    return ", ".join(stated) if stated else "none stated: every level free of failures meets it"


def _with_ci(value: float | None, interval: tuple[float, float] | None, form: str) -> str:
    shown = fmt(value, form)
    if interval is None or value is None:
        return shown
    return f"{shown} [{form.format(interval[0])}-{form.format(interval[1])}]"


def _runs_lines(report: DecideReport) -> list[str]:
    """Each repeat's own figures, in the order the repeats ran, with its bench report."""
    shown = [r for r in report.variants if len(r.runs) > 1]
    if not shown:
        return []
    lines = ["", "### Each repeat", "",
             "| variant | repeat | concurrency | TPOT p50 (ms) | output tok/s | failures | bench |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in shown:
        for run in r.runs:
            lines += [f"| {_cell(r.variant)} | {run.repeat} | {lv.concurrency} | "
                      f"{fmt(lv.tpot_p50_ms, '{:.2f}')} | {fmt(lv.output_tokens_per_s, '{:.1f}')} "
                      f"| {lv.failures} | {_link(run.bench_report, 'bench')} |"
                      for lv in run.levels]
    return lines


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
