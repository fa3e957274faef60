"""`opsctl up --variant X --gate`: keep a variant only when it proves itself, else bring back the
last good one.

One box holds one GLM-5, so the rollout is stop-then-start: what runs is stopped, X is started
and waited for, verified against the profile (`up` with the verify room's check), smoked with
the evals the profile configures, and its greedy outputs are compared with the last good
variant's smoke report when both compute the same attention. Dense and sparse attention differ
past `index_topk` tokens by design, and other weights differ anyway: then only the absolute
gates apply, and the result says so. Any failed gate, error or Ctrl-C removes X and brings the
last good variant back (with none recorded: the variant that ran before the gate, relaunched
and verified the same way); a pass records X, its image and its report as the last good. Only a
complete, passing smoke report passes: smoke turns Ctrl-C into a partial report, which the gate
turns back into Interrupted (exit 130, after the rollback), never into a pass.

Whatever can refuse the run (the rollback target, X's image, the eval datasets) is checked
before anything is stopped.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from opsctl.config.profiles import Deployment, Profile
from opsctl.config.review import attention_kind
from opsctl.config.runspec import base_url
from opsctl.core import labels
from opsctl.core.clock import Clock
from opsctl.core.errors import (
    Interrupted,
    LaunchError,
    OpsctlError,
    SmokeError,
    UsageError,
)
from opsctl.deploy.app import Progress, find_servers
from opsctl.deploy.launch import Launch
from opsctl.deploy.state import LastGood, StateDir, Verdict, host_checkpoint
from opsctl.engine.api import Engine
from opsctl.traffic.app import Traffic, check_launched, profile_evals, smoke_launched
from opsctl.traffic.smoke_evals import EvalRequest
from opsctl.verify.app import VerifyMismatch

# observe.metrics.GATE_OUTCOMES lists the same values (a unit test compares them).
Outcome = Literal["passed", "failed", "interrupted"]
DETAIL_CHARS = 200  # of a failed check's detail, in the one-line error
# Which gate a failed smoke check belongs to; any other check is the smoke gate.
_GATE_OF_CHECK = {"compare": "compare", "gsm8k": "eval gsm8k", "long_context": "eval long_context"}


class GateFailed(SmokeError):
    """A gate failed: the variant was removed and the last good one brought back (exit 5)."""


# Opens the readiness display of one `up` and yields its callback.
UpProgress = Callable[[Deployment], AbstractContextManager[Callable[[Progress], None]]]
# (kind, record, gateway URL): observe.metrics.push_report; raises OpsctlError when it fails.
Push = Callable[[str, dict[str, Any], str], None]


@dataclass(frozen=True)
class Rollback:
    deployment: Deployment
    image: str
    # "last good": the recorded last good variant; "running before the gate": with none
    # recorded, what the gate stopped (its variant and image from the container's labels).
    source: str = "last good"


@dataclass(frozen=True)
class GateResult:
    profile: str
    variant: str
    outcome: Outcome
    failed: list[str]  # "gate (detail)" per failed gate
    report: Path | None  # this run's smoke report, when smoke ran
    comparison: str  # what the greedy outputs were compared with, or why they were not
    rolled_back: str | None  # the variant brought back
    last_good: LastGood | None  # the record after this run
    push_error: str | None  # a failed metrics push (a warning, not a verdict)
    error: OpsctlError | None  # what the CLI raises: exit 5 when a gate failed


@dataclass(frozen=True)
class _Ctx:
    launch: Launch
    state: StateDir
    traffic: Traffic  # smoke of the launched variant, judged by its profile as launched
    progress: UpProgress
    on_step: Callable[[str], None]
    timeout_seconds: float | None  # readiness; None: the profile's
    gateway: str | None  # the gate's outcome and its smoke report are pushed here


def _no_progress(_: Deployment) -> AbstractContextManager[Callable[[Progress], None]]:
    return nullcontext(lambda progress: None)


def gate(
    deployment: Deployment, *, launch: Launch, traffic: Traffic,
    progress: UpProgress = _no_progress, on_step: Callable[[str], None] = lambda line: None,
    push: Push | None = None, gateway: str | None = None, timeout_seconds: float | None = None,
) -> GateResult:
    """Stop, start X, verify, smoke, compare; keep X as the last good or bring that one back.
    X's preflight runs before anything is stopped: a checkpoint X cannot load leaves what runs.
    The launch must verify and keep state (its last good variant); its lock is held throughout:
    the down, up and rollback are one change of the profile."""
    ctx = _Ctx(launch, launch.kept_state("the gate"), traffic, progress, on_step,
               timeout_seconds, gateway)
    with launch.locked([deployment.profile.name], "up --gate"):
        return _gate(ctx, deployment, push, gateway)


def _say_rollback(on_step: Callable[[str], None], back: Rollback | None,
                  last: LastGood | None) -> None:
    """What a failed gate would bring back, before anything is stopped."""
    if last is None:
        on_step(f"no last good variant recorded: a failed gate brings back {_what(back)}"
                if back is not None else
                "no last good variant recorded and nothing was running: a failed gate "
                "brings nothing back")
    elif back is not None and back.deployment.config_hash() != last.config_hash:
        on_step(f"note: the profile changed since {back.deployment.variant!r} passed; "
                "a rollback brings it back as the profile says now")


def _after_failure(profile: Profile, back: Rollback | None, last: LastGood | None,
                   rolled_back: str | None, problem: str | None) -> str:
    """What serves after a failed gate: nothing rolled back, the rollback, or its failure."""
    if back is None:
        return ("nothing was rolled back: no last good variant is recorded"
                + ("" if last is not None else " and nothing was running before the gate"))
    if rolled_back:
        return f"rolled back to {_what(back)}"
    return (f"bringing back {back.deployment.variant!r} failed too: {problem}; nothing of "
            f"profile {profile.name!r} is serving")


def _gate(ctx: _Ctx, deployment: Deployment, push: Push | None,
          gateway: str | None) -> GateResult:
    launch, state, on_step = ctx.launch, ctx.state, ctx.on_step
    profile, variant, engine, clock = (deployment.profile, deployment.variant, launch.engine,
                                       launch.clock)
    last = state.last_good(profile.name)
    back = _rollback_target(profile, last, engine, state)
    image = launch.image(deployment)
    if launch.preflight is not None:
        on_step(launch.preflight(deployment, engine, image).summary())
    compare_with, comparison = _comparison(deployment, last, back)
    evals = profile_evals(deployment)
    check_launched(deployment, evals, ctx.traffic)  # a dataset off its pin: refused here
    path = state.gate_report_path(profile.name, variant, clock.now())
    _say_rollback(on_step, back, last)
    try:
        stopped = launch.down(profile.name).removed
        on_step(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")
        on_step(comparison)
        failed, verdict, report = _attempt(ctx, deployment, image, path, compare_with, evals)
    except BaseException as exc:
        outcome: Outcome = ("interrupted" if isinstance(exc, KeyboardInterrupt | Interrupted)
                            else "failed")
        on_step(f"{outcome}: removing what this run started")
        _restore(ctx, profile, back)
        _push(push, gateway, deployment, outcome, clock)
        raise
    if not failed:
        record = LastGood(profile=profile.name, variant=variant, image=image,
                          config_hash=deployment.config_hash(), report=str(path),
                          at=clock.now().isoformat(timespec="seconds"),
                          checkpoint=verdict.checkpoint if verdict else None)
        state.write_last_good(record)
        on_step(f"passed: {variant!r} is the last good variant of {profile.name!r}")
        return GateResult(profile.name, variant, "passed", [], report, comparison, None, record,
                          _push(push, gateway, deployment, "passed", clock), None)
    on_step(f"failed: {'; '.join(failed)}")
    rolled_back, problem = _restore(ctx, profile, back)
    where = _after_failure(profile, back, last, rolled_back, problem)
    error = GateFailed(
        f"gate failed for {profile.name}/{variant}: {'; '.join(failed)}; {variant!r} removed, "
        f"{where}",
        hint=(f"smoke report: {report}; " if report else "")
        + "`opsctl status` shows what runs now",
    )
    return GateResult(profile.name, variant, "failed", failed, report, comparison, rolled_back,
                      last, _push(push, gateway, deployment, "failed", clock), error)


def _rollback_target(profile: Profile, last: LastGood | None, engine: Engine,
                     state: StateDir) -> Rollback | None:
    """The last good variant and image, both still there; refused before anything stops.
    With no last good recorded: what runs now (the variant and image its container's labels
    name), when the profile still has that variant and the engine the image."""
    if last is None:
        return _running_before(profile, engine)
    record = state.last_good_path(profile.name)
    if last.variant not in profile.variants:
        raise UsageError(
            f"the last good variant {last.variant!r} is no longer in profile {profile.name!r}",
            hint=f"a failed gate could not bring it back: restore the variant, or remove {record} "
            "to gate without a rollback target")
    if engine.image_labels(last.image) is None:
        raise LaunchError(
            f"the last good variant's image {last.image} is not on this engine",
            hint=f"rebuild it so a failed gate can bring {last.variant!r} back, or remove {record} "
            "to gate without a rollback target")
    return Rollback(profile.resolve(last.variant), last.image)


def _running_before(profile: Profile, engine: Engine) -> Rollback | None:
    """What serves now, as the rollback target; None when nothing runs. A server that runs but
    could not be brought back is refused before anything stops, as a last good one is."""
    for info in find_servers(engine, profile.name):
        if info.status != "running":
            continue
        variant = info.labels.get(labels.VARIANT, "")
        image = info.labels.get(labels.IMAGE) or info.image
        if variant not in profile.variants:
            raise UsageError(
                f"{info.name} serves variant {variant!r}, which profile {profile.name!r} no "
                "longer has: a failed gate could not bring it back",
                hint=f"restore the variant, or `opsctl down --profile {profile.name}` first to "
                "gate without a rollback target")
        if engine.image_labels(image) is None:
            raise LaunchError(
                f"{info.name} runs image {image}, which is no longer on this engine: a failed "
                "gate could not bring it back",
                hint=f"rebuild it, or `opsctl down --profile {profile.name}` first to gate "
                "without a rollback target")
        return Rollback(profile.resolve(variant), image, "running before the gate")
    return None


def _what(back: Rollback) -> str:
    return f"{back.deployment.variant!r} ({back.source})"


def _comparison(deployment: Deployment, last: LastGood | None,
                back: Rollback | None) -> tuple[Path | None, str]:
    """The last good report to compare greedy outputs with, and why (or why not)."""
    if last is None or back is None:
        return None, ("no last good variant recorded: greedy outputs not compared, only the "
                      "absolute gates apply")
    theirs, mine = attention_kind(back.deployment), attention_kind(deployment)
    if theirs != mine:
        return None, (f"greedy outputs not compared with last good {last.variant!r}: it computes "
                      f"{theirs}, {deployment.variant!r} {mine}; only the absolute gates apply")
    now = host_checkpoint(deployment.model.host_path).id
    before = last.checkpoint.id if last.checkpoint else None
    if now and before and now != before:
        return None, (f"greedy outputs not compared with last good {last.variant!r}: the "
                      f"checkpoint changed ({before[:12]} -> {now[:12]}); only the absolute "
                      "gates apply")
    report = Path(last.report)
    if not report.is_file():
        return None, (f"greedy outputs not compared: the last good report {report} is gone; "
                      "only the absolute gates apply")
    if not _complete_pass(report):
        return None, (f"greedy outputs not compared: the last good report {report} is partial "
                      "or not a pass; only the absolute gates apply")
    return report, f"greedy outputs compared with last good {last.variant!r} ({report})"


def _complete_pass(report: Path) -> bool:
    """Whether a recorded smoke report is whole and passed (an older opsctl recorded partial
    ones as the last good); an unreadable one is left to smoke's --compare-with to refuse."""
    from opsctl.traffic.smoke_report import load_reference

    try:
        reference = load_reference(report)
    except OpsctlError:
        return True
    return reference.passed and not reference.partial


def _launch(ctx: _Ctx, deployment: Deployment, image: str) -> Verdict | None:
    with ctx.progress(deployment) as on_progress:
        started = ctx.launch.up(deployment, image=image, on_progress=on_progress,
                                timeout_seconds=ctx.timeout_seconds,
                                preflight=False)  # gate() ran it before stopping what ran
    return started.verdict


def _attempt(ctx: _Ctx, deployment: Deployment, image: str, path: Path,
             compare_with: Path | None,
             evals: EvalRequest) -> tuple[list[str], Verdict | None, Path | None]:
    """Start, verify and smoke X: the failed gates (none when it passed), its verdict and the
    smoke report (None when smoke did not run)."""
    ctx.on_step(f"starting {deployment.variant!r} ({image})")
    try:
        verdict = _launch(ctx, deployment, image)
    except VerifyMismatch as exc:
        return [_named("verify", exc.message)], None, None
    except LaunchError as exc:
        return [_named("launch", exc.message)], None, None
    ctx.on_step(f"ready, {verdict.summary() if verdict else 'not verified'}; smoke")
    report = smoke_launched(deployment, base_url(deployment), ctx.traffic, report=path,
                            compare_with=compare_with, evals=evals, gateway=ctx.gateway)
    if report.partial:  # smoke catches Ctrl-C and returns what it had: never a pass
        stopped = report.stop_error("the gate's smoke", path)
        if stopped is not None:
            raise stopped
        return [_named("smoke", f"partial report: {report.partial_reason}")], verdict, path
    failed = [_named(_GATE_OF_CHECK.get(check.name, f"smoke {check.name}"), check.detail)
              for check in report.checks if check.status == "fail"]
    if not failed and not report.passed:
        failed = [_named("smoke", "the report is not a pass")]
    return failed, verdict, path


def _named(gate_name: str, detail: str) -> str:
    line = " ".join(detail.split())
    cut = line[:DETAIL_CHARS] + ("..." if len(line) > DETAIL_CHARS else "")
    return f"{gate_name} ({cut})"


def _restore(ctx: _Ctx, profile: Profile, back: Rollback | None) -> tuple[str | None, str | None]:
    """Remove whatever of the profile runs now (this run's), then bring back the last good.

    Returns (the variant brought back, why that failed); a rollback failure is reported, not
    raised, so the gate's own verdict (or Ctrl-C) stays what the command ends with.
    """
    try:
        removed = ctx.launch.down(profile.name).removed
        if removed:
            ctx.on_step(f"removed {', '.join(removed)}")
        if back is None:
            return None, None
        ctx.on_step(f"bringing back {back.source} {back.deployment.variant!r} ({back.image})")
        _launch(ctx, back.deployment, back.image)
        ctx.on_step(f"{back.deployment.variant!r} is back")
    except OpsctlError as exc:
        gone = (f"; {back.deployment.variant!r} ({back.source}) is no longer serving"
                if back is not None else "")
        ctx.on_step(f"rollback failed: {exc.message}{gone}")
        return None, exc.message
    return back.deployment.variant, None


def _push(push: Push | None, gateway: str | None, deployment: Deployment, outcome: Outcome,
          clock: Clock) -> str | None:
    """Push the outcome (opsctl_gate_* metrics); a failed push is a warning, never raised."""
    if push is None or not gateway:
        return None
    record = {"profile": deployment.profile.name, "variant": deployment.variant,
              "outcome": outcome, "finished_at": clock.now().timestamp()}
    try:
        push("gate", record, gateway)
    except OpsctlError as exc:
        return exc.message
    return None
