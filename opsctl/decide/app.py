"""`opsctl decide`: run every variant through the same gates and sweep, say which one to run.

One box holds one GLM-5, so variants run one after another, stop-then-start as the gate does:
up (verified against the profile), smoke with the profile's evals (GSM8K, long-context
probes), a bench sweep at the levels, down. A variant that does not start, does not resolve
what the profile says, or fails smoke is disqualified with its one-line reason and the files
that show it, and the run goes on. Greedy outputs of variants that compute the same attention
are compared pairwise afterwards: a disagreement disqualifies neither (one of them is wrong; the
eval decides which), it is evidence.

Under noise (`repeats`, default 2): the variants' sweeps run interleaved, A B A B ... (each
repeat a fresh up -> bench -> down; the gates run in the first), so drift of the box falls on
every variant alike. Each level's figures are pooled over the repeats from the per-request
records, with bootstrap 95% intervals (opsctl.decide.figures, bootstrap). The winner is the
qualified variant with the best SLO goodput: the highest level free of failures that meets the
profile's SLO (each level free of failures, without an SLO), then the higher output throughput
there; two variants whose throughputs there differ by less than `margin`, or whose ratio's
interval holds 1, are a tie (opsctl.decide.verdict), and the verdict says what would separate
them.

Collaborators come in as arguments, in the shapes `up --gate` gets them (the launch: engine,
image naming, the verify room's check, state, HTTP, clock; what the traffic room's smoke and
bench take from outside it); decide calls the traffic room's smoke and bench itself, with the
Deployment it launched: nothing reads the profile file again after the launch.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from opsctl.config.profiles import Deployment, Profile
from opsctl.config.review import attention_kind, computes
from opsctl.config.sloconfig import Slo
from opsctl.core.clock import Clock
from opsctl.core.errors import (
    EXIT_DAEMON,
    EXIT_USAGE,
    DaemonUnreachable,
    Interrupted,
    LaunchError,
    OpsctlError,
    SmokeError,
    UsageError,
)
from opsctl.core.files import atomic_write_text
from opsctl.core.reports import (
    BENCH_JSON,
    DECIDE_JSON,
    DECIDE_MARKDOWN,
    DECIDE_RESCORED_JSON,
    DECIDE_RESCORED_MARKDOWN,
)
from opsctl.decide.figures import Samples, new_run, pool_variant
from opsctl.decide.report import (
    SMOKE_FILE,
    UP_ERROR_FILE,
    VERIFY_FILE,
    ChartWriter,
    DecideReport,
    Gate,
    Probe,
    ResolvedField,
    VariantRecord,
    load_report,
    write_report,
)
from opsctl.decide.settings import DECIDE_DEFAULTS, DecideSettings
from opsctl.decide.verdict import accuracy_gate, compare_pairs, recommend
from opsctl.deploy.app import Progress, left_line
from opsctl.deploy.launch import Launch
from opsctl.gate.gate import UpProgress
from opsctl.traffic.app import (
    Traffic,
    check_launched,
    check_sweep,
    profile_evals,
    smoke_launched,
    sweep_launched,
)
from opsctl.traffic.bench.report import BenchReport
from opsctl.traffic.smoke_report import SmokeReport
from opsctl.traffic.smoke_report import verdict_error as smoke_verdict
from opsctl.verify.app import VerifyResult

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class NoVariantQualified(SmokeError):
    """No variant passed every gate with a level free of failed requests (exit 5)."""


@dataclass(frozen=True)
class DecideRequest:
    variants: tuple[str, ...]  # empty: every variant of the profile, in its order
    out_dir: Path
    settings: DecideSettings = DECIDE_DEFAULTS  # levels, requests, evals, timeout, repeats, margin
    chart: ChartWriter | None = None  # draws decide.md's comparison chart (the CLI's: the view's)


@dataclass(frozen=True)
class DecideResult:
    report: DecideReport
    out_dir: Path
    written: list[Path]
    error: OpsctlError | None  # what the CLI raises: 5 none qualified, 4/6 none could start, 130


@dataclass(frozen=True)
class _Ctx:
    launch: Launch
    traffic: Traffic  # smoke and bench of each launched variant, by its profile as launched
    progress: UpProgress
    on_step: Callable[[str], None]
    request: DecideRequest
    ticker: Ticker


def _up_quietly(_: Deployment) -> AbstractContextManager[Callable[[Progress], None]]:
    return nullcontext(lambda progress: None)


def decide(
    profile: Profile, request: DecideRequest, *, launch: Launch, traffic: Traffic,
    progress: UpProgress | None = None,
    on_step: Callable[[str], None] = lambda line: None,
    on_progress: Callable[[str], None] = lambda line: None,
) -> DecideResult:
    """Every variant through up -> verify -> smoke -> bench -> down; the verdict and its files.

    Refused before anything is stopped: an unknown or repeated variant, a variant whose image
    is not on the engine, an eval dataset that is not its pin.
    """
    deployments = chosen(profile, request.variants)
    asked = request.settings
    images = [launch.image(deployment) for deployment in deployments]
    out = request.out_dir
    records = [_record(deployment, image, index)
               for index, (deployment, image) in enumerate(zip(deployments, images, strict=True))]
    check_launched(deployments[0], profile_evals(deployments[0], skip=asked.skip_eval), traffic)
    check_sweep(deployments[0], asked.sweep())  # a dataset or lengths it cannot send: exit 2
    clock = launch.clock
    slo = profile.slo
    report = _new_report(profile, asked, records, clock.now().isoformat(timespec="seconds"))
    began = clock.monotonic()
    ticker = Ticker(clock, began, len(records) * asked.repeats, len(records), asked.repeats,
                    on_progress)
    ctx = _Ctx(launch, traffic, progress or _up_quietly, on_step, request, ticker)
    smoked: dict[str, SmokeReport] = {}
    # One lock for the whole run, taken before anything is touched (each up/down re-enters it):
    # between two variants no other opsctl run may start a server on this profile and skew the
    # comparison, and a busy profile stops decide before it removes anything.
    with launch.locked([profile.name], "decide"):
        running = records[0]
        try:
            for repeat in range(1, asked.repeats + 1):
                for index, (deployment, image, running) in enumerate(
                        zip(deployments, images, records, strict=True)):
                    found = _sweep_variant(ctx, deployment, image, running, repeat, index)
                    if found is not None:
                        smoked[running.variant] = found
        except BaseException as exc:
            result = _stopped(ctx, report, running, smoked, exc, clock.monotonic() - began, slo)
            if result is None:
                raise
            return result
    _conclude(report, smoked, clock.monotonic() - began, out, slo)
    return DecideResult(report, out, write_report(report, out, chart=request.chart),
                        _verdict_error(report, out))


def _new_report(profile: Profile, asked: DecideSettings, records: list[VariantRecord],
                started_at: str) -> DecideReport:
    slo = profile.slo
    return DecideReport(started_at=started_at,
                        profile=profile.name, concurrency=list(asked.concurrency),
                        requests_per_level=asked.requests_per_level,
                        skip_eval=asked.skip_eval, variants=records, repeats=asked.repeats,
                        margin=asked.margin, settings=asked,
                        slo_ttft_ms=slo.ttft.threshold_ms if slo and slo.ttft else None,
                        slo_tpot_ms=slo.tpot.threshold_ms if slo and slo.tpot else None,
                        reference=profile.eval.reference,
                        max_accuracy_drop=profile.eval.max_accuracy_drop)


def _sweep_variant(ctx: _Ctx, deployment: Deployment, image: str, record: VariantRecord,
                   repeat: int, index: int) -> SmokeReport | None:
    """One variant's turn in a repeat; a disqualified variant is not swept again."""
    if repeat > 1 and record.status != "qualified":
        ctx.ticker.skip()
        return None
    ctx.ticker.begin(repeat, index, record.variant)
    found = _run_variant(ctx, deployment, image, record, repeat)
    ctx.ticker.end()
    return found


def _stopped(ctx: _Ctx, report: DecideReport, running: VariantRecord,
             smoked: dict[str, SmokeReport], exc: BaseException, elapsed_s: float,
             slo: Slo | None) -> DecideResult | None:
    """A run stopped by `exc`: what it started removed, the partial report written; the
    result for a Ctrl-C, None for anything else (the caller raises it on)."""
    out = ctx.request.out_dir
    ctx.on_step("stopped: removing what this run started")
    report.left_behind = _remove_quietly(ctx, report.profile, exc)
    report.record_stop(exc)
    if running.status == "not run":
        running.status, running.reason = "interrupted", report.partial_reason
    _conclude(report, smoked, elapsed_s, out, slo)
    written = write_report(report, out, chart=ctx.request.chart)
    if not isinstance(exc, KeyboardInterrupt):
        return None
    stopped = report.stop_error("decide", out / DECIDE_JSON)
    if stopped is not None:
        for line in report.left_behind:
            stopped.add_clause(line)
    return DecideResult(report, out, written, stopped)


def chosen(profile: Profile, variants: tuple[str, ...]) -> list[Deployment]:
    """The variants to run, resolved (every one of the profile when none is named); UsageError
    for an unknown or repeated name. The CLI calls it before connecting to the engine."""
    names = variants or tuple(profile.variants)
    if len(set(names)) != len(names):
        raise UsageError(f"--variants names a variant twice: {', '.join(names)}",
                         hint="name each variant once")
    return [profile.resolve(name) for name in names]


def _record(deployment: Deployment, image: str, index: int) -> VariantRecord:
    spec = deployment.profile.variants[deployment.variant]
    return VariantRecord(
        variant=deployment.variant, description=spec.description,
        release=deployment.image.sglang_version, image=image, computes=computes(deployment),
        attention=attention_kind(deployment), kv_cache_dtype=deployment.server.kv_cache_dtype,
        directory=f"{index + 1:02d}-{_UNSAFE.sub('_', deployment.variant)}",
    )


def _run_variant(ctx: _Ctx, deployment: Deployment, image: str,
                 record: VariantRecord, repeat: int = 1) -> SmokeReport | None:
    """Stop what runs, then up -> smoke -> bench -> down (after the first repeat: up -> bench
    -> down, with no preflight: the image and checkpoint were probed in the first); fills
    `record`. Each launch is verified; a later repeat keeps its verify.json, logs and sweep in
    its own folder (repeat-N/), so the first repeat's evidence stays as it was. Returns the
    smoke report (None when smoke did not run). Ctrl-C and bugs propagate; a variant's own
    failure is recorded as its disqualification."""
    out, name = ctx.request.out_dir, deployment.variant
    folder = out / record.directory
    if repeat > 1:
        folder = folder / f"repeat-{repeat}"
    # What ran before this run (the previous variant is down already): its log goes to the run.
    stopped = ctx.launch.down(deployment.profile.name, logs_dir=out, on_note=ctx.on_step).removed
    ctx.on_step(_starting_line(ctx, name, stopped, image, repeat))
    verify = ctx.launch.verify
    if verify is None:
        raise ValueError("decide verifies every variant: its launch needs a verify check")
    ctx.ticker.phase("up")
    verified: list[Path] = []  # verify.json, once the verify room has answered
    verifying: list[bool] = []  # set once the server was ready and verify began

    def recording_verify(shown: Deployment, url: str, log_text: str) -> VerifyResult:
        verifying.append(True)
        result = verify(shown, url, log_text)
        verified.append(_write(folder / VERIFY_FILE, json.dumps(result.to_json(), indent=2)))
        record.resolved = [ResolvedField(field=c.field, expected=c.expected, source=c.source,
                                         served=c.resolved, status=c.status) for c in result.checks]
        return result

    try:
        with ctx.progress(deployment) as on_progress:
            started = ctx.launch.verifying(recording_verify).up(
                deployment, image=image, timeout_seconds=ctx.request.settings.timeout_s,
                on_progress=on_progress, logs_dir=folder, on_note=ctx.on_step,
                preflight=repeat == 1)
    except OpsctlError as exc:
        if isinstance(exc, Interrupted):  # a Ctrl-C whose clean-up left something behind
            raise
        # up saved the log of what it removed into the variant's folder.
        files = [_write(folder / UP_ERROR_FILE, _error_text(exc)), *verified,
                 *sorted(folder.glob("*.log"))]
        _disqualify(ctx, record, "verify" if verifying else "start",
                    _in_repeat(repeat) + exc.message, files, exc.exit_code)
        return None
    if started.verdict is not None and repeat == 1:
        record.verify = started.verdict.summary()
        record.checkpoint = started.verdict.checkpoint.label()
    record.evidence += [_rel(out, path) for path in verified]
    try:
        if repeat > 1:
            ctx.on_step(f"{name}: ready; bench, repeat {repeat} of {ctx.request.settings.repeats}")
            _bench(ctx, deployment, started.base_url, folder, record, repeat)
            smoked = None
        else:
            ctx.on_step(f"{name}: ready, {record.verify or 'not verified'}; smoke")
            smoked = _smoke_and_bench(ctx, deployment, started.base_url, folder, record)
    except BaseException:
        # Ctrl-C or a bug stays what the run ends with: the teardown's own failure, if any, is
        # left to the caller's clean-up (_remove_quietly), which names what is left.
        with contextlib.suppress(OpsctlError):
            _teardown(ctx, deployment, folder, record)
        raise
    try:
        _teardown(ctx, deployment, folder, record)
    except OpsctlError as exc:  # a lost daemon, a full disk: the clean-up (_remove_quietly)
        # tries again and names what is then still left; until then nothing is said to be left.
        _leave_to_cleanup(exc, left_line(started.container))
        raise
    return smoked


def _starting_line(ctx: _Ctx, name: str, stopped: list[str], image: str, repeat: int) -> str:
    """What was stopped and what starts now (and which repeat, when there are several)."""
    line = f"{name}: " + (f"stopped {', '.join(stopped)}; " if stopped else "")
    line += f"starting {image}"
    repeats = ctx.request.settings.repeats
    return line + (f" (repeat {repeat} of {repeats})" if repeats > 1 else "")


def _in_repeat(repeat: int) -> str:
    return f"repeat {repeat}: " if repeat > 1 else ""


def _leave_to_cleanup(exc: OpsctlError, line: str) -> None:
    """A teardown's failure says nothing is left yet: `line` (the server) and what it named as
    left go to the caller's clean-up, which names what is then still left."""
    if line not in exc.left:
        exc.left.append(line)
    for said in exc.left:
        exc.message = exc.message.replace(f"; {said}", "")
    exc.args = (exc.message,)


def _teardown(ctx: _Ctx, deployment: Deployment, folder: Path, record: VariantRecord) -> None:
    """Down, with the server's whole log saved into the variant's folder before it is removed."""
    ctx.ticker.phase("down")
    logs = ctx.launch.down(deployment.profile.name, logs_dir=folder, on_note=ctx.on_step).logs
    record.evidence += [_rel(ctx.request.out_dir, path) for path in logs]


def _smoke_and_bench(ctx: _Ctx, deployment: Deployment, base_url: str, folder: Path,
                     record: VariantRecord) -> SmokeReport:
    out, skip_eval = ctx.request.out_dir, ctx.request.settings.skip_eval
    path = folder / SMOKE_FILE
    ctx.ticker.phase("smoke" + ("" if skip_eval else " (with evals)"))
    # No reference: decide compares the variants with each other afterwards, never as a
    # smoke verdict.
    report = smoke_launched(deployment, base_url, ctx.traffic, report=path, compare_with=None,
                            evals=profile_evals(deployment, skip=skip_eval), gateway=None)
    _raise_stop(report, "smoke", path)
    record.smoke_report = _rel(out, path)
    record.evidence.append(record.smoke_report)
    if report.gsm8k is not None:
        record.accuracy = report.gsm8k.score
    record.probes = [Probe(name=p.name, passed=p.passed, detail=p.detail)
                     for p in report.long_context or []]
    failed = smoke_verdict(report, path)
    if failed is not None:
        _disqualify(ctx, record, "smoke", failed.message, [], None)
        return report
    record.status = "qualified"
    ctx.on_step(f"{deployment.variant}: smoke passed; bench at concurrency "
                f"{', '.join(map(str, ctx.request.settings.concurrency))}")
    _bench(ctx, deployment, base_url, folder, record, 1)
    return report


def _bench(ctx: _Ctx, deployment: Deployment, base_url: str, folder: Path,
           record: VariantRecord, repeat: int) -> None:
    """One repeat's sweep into `folder`, recorded as a run of `record`."""
    out = ctx.request.out_dir
    ctx.ticker.phase("bench")
    swept = sweep_launched(deployment, base_url, ctx.request.settings.sweep(), folder,
                           ctx.traffic)
    _raise_stop(swept, "bench", folder / BENCH_JSON)
    path = _rel(out, folder / BENCH_JSON)
    if repeat == 1:
        record.bench_report = path
    run = swept.variants[0]  # the one target bench was given
    note = run.error or run.stopped
    record.runs.append(new_run(repeat, path, run.levels, note))
    record.levels = record.runs[0].levels  # until the runs are pooled (`_conclude`)
    if note:
        record.bench_note = note if repeat == 1 else f"repeat {repeat}: {note}"


def _raise_stop(report: SmokeReport | BenchReport, what: str, where: Path) -> None:
    """A smoke or bench stopped by Ctrl-C is this run's Ctrl-C; one stopped by a bug is a bug."""
    stopped = report.stop_error(what, where)
    if isinstance(stopped, Interrupted):
        raise KeyboardInterrupt
    if stopped is not None:
        raise stopped


def _disqualify(ctx: _Ctx, record: VariantRecord, gate: Gate, reason: str, files: list[Path],
                exit_code: int | None) -> None:
    record.status, record.failed_gate = "disqualified", gate
    record.reason = " ".join(reason.split())
    record.exit_code = exit_code if gate == "start" else None
    record.evidence += [_rel(ctx.request.out_dir, path) for path in files]
    ctx.on_step(f"{record.variant}: DISQUALIFIED at {gate}: {record.reason}")


def _error_text(exc: OpsctlError) -> str:
    return "\n".join([f"error: {exc.message}", f"hint: {exc.hint}", *exc.details]) + "\n"


def _write(path: Path, text: str) -> Path:
    return atomic_write_text(path, text)


def _rel(out: Path, path: Path) -> str:
    return str(path.relative_to(out))


def _remove_quietly(ctx: _Ctx, profile_name: str, cause: BaseException) -> list[str]:
    """After Ctrl-C, a bug or a teardown that failed: remove this run's server; a failure here
    must not hide why. Returns what is left behind (each line names the container and the
    command that removes it); the error the run ends with names it too."""
    try:
        removed = ctx.launch.down(profile_name, logs_dir=ctx.request.out_dir).removed
    except OpsctlError as exc:
        ctx.on_step(f"could not remove the server: {exc.message}")
        known = cause.left if isinstance(cause, OpsctlError) else []
        left = [*known, *(line for line in exc.left if line not in known)] or [
            f"the server of profile {profile_name!r} may be left: `opsctl down --profile "
            f"{profile_name}` removes it once the engine answers"]
        if isinstance(cause, OpsctlError):
            for line in left:
                cause.add_clause(line)
        return left
    if removed:
        ctx.on_step(f"removed {', '.join(removed)}")
    return []


def _conclude(report: DecideReport, smoked: dict[str, SmokeReport], elapsed_s: float,
              out: Path, slo: Slo | None) -> None:
    report.pairs = compare_pairs(report.variants, smoked)
    conclude(report, out, slo)
    report.duration_s = round(elapsed_s, 3)


def conclude(report: DecideReport, out: Path, slo: Slo | None) -> None:
    """Pool every swept variant's repeats (their records read back from `out`) and judge."""
    samples: Samples = {}
    for record in report.variants:
        if not record.runs:
            continue
        try:
            pool_variant(record, out, slo, samples)
        except OpsctlError as exc:  # a report or requests file that cannot be read back
            record.bench_note = f"its repeats could not be pooled: {exc.message}"
    accuracy_gate(report)
    report.winner, report.tie, report.recommendation = recommend(report, samples)


def rescore(directory: Path, slo: Slo | None, margin: float | None = None,
            chart: ChartWriter | None = None) -> DecideResult:
    """`decide --rescore DIR`: the run in DIR judged again from its files (its bench reports
    and per-request records) by `slo` (and `margin`), written beside the original as
    decide-rescored.json/.md; nothing is launched or sent."""
    report = load_report(directory)
    report.slo_ttft_ms = slo.ttft.threshold_ms if slo and slo.ttft else None
    report.slo_tpot_ms = slo.tpot.threshold_ms if slo and slo.tpot else None
    if margin is not None:
        report.margin = margin
    conclude(report, directory, slo)
    written = write_report(report, directory, (DECIDE_RESCORED_JSON, DECIDE_RESCORED_MARKDOWN),
                           chart)
    return DecideResult(report, directory, written,
                        _verdict_error(report, directory, DECIDE_RESCORED_MARKDOWN))


class Ticker:
    """decide's overall progress, one line per phase: which variant of how many, which repeat,
    the phase, the time so far and an estimate of what is left (the mean time of a finished
    variant run times the runs still to go; none before the first has finished)."""

    def __init__(self, clock: Clock, began: float, total: int, variants: int, repeats: int,
                 emit: Callable[[str], None]) -> None:
        self.clock, self.began, self.total, self.emit = clock, began, total, emit
        self.variants, self.repeats = variants, repeats
        self.done = 0
        self.finished = 0  # runs timed (skipped ones take no time)
        self.spent = 0.0
        self.started = began
        self.where = ""

    def begin(self, repeat: int, index: int, variant: str) -> None:
        self.started = self.clock.monotonic()
        self.where = (f"variant {index + 1} of {self.variants} ({variant})"
                      + (f", repeat {repeat} of {self.repeats}" if self.repeats > 1 else ""))

    def phase(self, name: str) -> None:
        now = self.clock.monotonic()
        left = self.total - self.done
        eta = (f"about {_duration(self.spent / self.finished * left - (now - self.started))} "
               "left" if self.finished else "time left known after the first variant")
        self.emit(f"[{self.done + 1}/{self.total}] {self.where}: {name}; elapsed "
                  f"{_duration(now - self.began)}, {eta}")

    def end(self) -> None:
        self.spent += self.clock.monotonic() - self.started
        self.finished += 1
        self.done += 1

    def skip(self) -> None:
        self.done += 1


def _duration(seconds: float) -> str:
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    return (f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s")


def _verdict_error(report: DecideReport, out: Path,
                   markdown: str = DECIDE_MARKDOWN) -> OpsctlError | None:
    """None with a winner; the start failure's own code (4 launch, 6 daemon, 2 usage) when no
    variant could start at all; else 5."""
    if report.winner is not None or report.tie:
        return None
    hint = f"the evidence is in {out / markdown}"
    starts = [r for r in report.variants if r.failed_gate == "start"]
    if starts and len(starts) == len(report.variants):
        first = starts[0]
        error_class = {EXIT_USAGE: UsageError, EXIT_DAEMON: DaemonUnreachable}.get(
            first.exit_code or 0, LaunchError)
        return error_class(f"decide: no variant could start; {first.variant}: {first.reason}",
                           hint=hint)
    return NoVariantQualified(f"decide: {report.recommendation}", hint=hint)
