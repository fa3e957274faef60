"""`opsctl tune`: measure a variant at each point of a grid of server settings, keep the best.

Per point: up (stop-then-start, verified) -> a short bench at the concurrency (its warm-up
requests are the smoke: they must succeed) -> down. A point that cannot start, run or pass is
recorded with the reason from the error and the log, and the search goes on. The state is saved
after every point; Ctrl-C saves it too, takes the server down and exits 130, and `--resume`
continues. The search rule is opsctl.tune.search's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from opsctl.config.profiles import Deployment
from opsctl.core.clock import Clock
from opsctl.core.errors import Interrupted, OpsctlError
from opsctl.tune import report, search
from opsctl.tune.search import GRID, Point, Price
from opsctl.tune.settings import TUNE_DEFAULTS, TuneSettings
from opsctl.tune.state import Measurement, Question, TuneState, now, resumed

LOG_LINES = 8
# First match names the cause of a failed point.
CAUSES = (
    ("oom", re.compile(r"out of memory|OutOfMemoryError|CUDA error: out of memory", re.I)),
    ("nccl", re.compile(r"\bNCCL\b|ncclUnhandled|ncclSystemError", re.I)),
    ("flag", re.compile(r"unrecognized arguments|invalid choice|error: argument|"
                        r"not accepted by sglang|unknown flag", re.I)),
)


@dataclass(frozen=True)
class Measure:
    """One short bench at the concurrency."""

    tpot_p50_ms: float | None
    ttft_p50_ms: float | None
    output_tokens_per_s: float | None
    failed_requests: int
    error: str | None  # the bench could not run or the smoke (warm-up) failed


class PointRunner(Protocol):
    """The deploy and traffic rooms, as tune uses them."""

    def up(self, deployment: Deployment) -> str:
        """Replace what runs with `deployment`, wait until it is ready and verified; its URL."""
        ...

    def bench(self, deployment: Deployment, base_url: str, concurrency: int,
              requests: int) -> Measure:
        """Sweep the launched `deployment` at `base_url`, judged by its profile as launched."""
        ...

    def down(self, deployment: Deployment) -> None: ...


@dataclass(frozen=True)
class TuneRequest:
    params: tuple[str, ...]
    out_dir: Path
    settings: TuneSettings = TUNE_DEFAULTS  # each point's bench, the budget
    resume: bool = False


@dataclass(frozen=True)
class TuneResult:
    state: TuneState
    points: int
    best: Measurement | None
    out_dir: Path
    written: list[Path]
    plot_note: str | None


# (key, rung, requests): a point is about to be measured; then its Measurement.
OnStart = Callable[[str, int, int], None]
OnDone = Callable[[Measurement], None]
PlotWriter = Callable[[TuneState, Path], tuple[list[Path], str | None]]


def cause(error: OpsctlError) -> tuple[str, list[str]]:
    """`kind: message` and the log lines that show it (the error's details)."""
    lines = [line for line in error.details if line.strip() and not line.startswith("---")]
    for kind, pattern in CAUSES:
        telling = [line for line in lines if pattern.search(line)]
        if telling or pattern.search(error.message):
            return f"{kind}: {error.message}", (telling or lines)[-LOG_LINES:]
    return f"start: {error.message}" if "exited" in error.message else error.message, \
        lines[-LOG_LINES:]


class _Search:
    def __init__(self, deployment: Deployment, state: TuneState, runner: PointRunner,
                 clock: Clock, out_dir: Path, on_start: OnStart, on_done: OnDone) -> None:
        self.deployment, self.state, self.runner, self.clock = deployment, state, runner, clock
        self.out_dir, self.on_start, self.on_done = out_dir, on_start, on_done

    def price(self) -> Price | None:
        s = self.state
        if s.price_fixed_s is None or s.price_per_request_s is None:
            return None
        return Price(s.price_fixed_s, s.price_per_request_s)

    def fits(self, requests: int) -> bool:
        price, budget = self.price(), self.state.budget_s
        return budget is None or price is None or self.state.spent_s + price.of(requests) <= budget

    def point(self, point: Point, rung: int, requests: int) -> Measurement | None:
        key = search.key(point)
        done = self.state.measured(key, rung)
        if done is not None:
            return done
        if not self.fits(requests):
            if f"{key}@{rung}" not in self.state.skipped:
                self.state.skipped.append(f"{key}@{rung}")
            return None
        self.on_start(key, rung, requests)
        measurement = self._measure(point, key, rung, requests)
        self.state.record(measurement)
        self.state.save(self.out_dir)
        self.on_done(measurement)
        return measurement

    def _measure(self, point: Point, key: str, rung: int, requests: int) -> Measurement:
        started = self.clock.monotonic()
        record = Measurement(key=key, point=point, rung=rung, requests=requests, status="failed",
                             at=now())
        deployment = search.apply(self.deployment, point)
        try:
            url = self.runner.up(deployment)
            record.up_s = self.clock.monotonic() - started
            measured = self.runner.bench(deployment, url, self.state.question.concurrency,
                                         requests)
            record.bench_s = self.clock.monotonic() - started - record.up_s
            record.tpot_p50_ms, record.ttft_p50_ms = measured.tpot_p50_ms, measured.ttft_p50_ms
            record.output_tokens_per_s = measured.output_tokens_per_s
            record.failed_requests = measured.failed_requests
            if measured.error or measured.tpot_p50_ms is None:
                record.reason = f"bench: {measured.error or 'no TPOT measured'}"
            else:
                record.status = "ok"
        except OpsctlError as exc:
            record.reason, record.log = cause(exc)
        finally:
            self._down(deployment)
            record.total_s = self.clock.monotonic() - started
        return record

    def _down(self, deployment: Deployment) -> None:
        """Take the point's server down; a Ctrl-C that cuts the removal short (it lands while
        `down` saves the log or stops the container) finishes it first, then stops the search
        (a second Ctrl-C leaves it)."""
        try:
            self.runner.down(deployment)
        except KeyboardInterrupt:
            self.runner.down(deployment)
            raise

    def run(self, points: list[Point]) -> None:
        full = self.state.question.requests
        first = self.point(points[0], 0, full)
        if self.state.mode is None and first is not None:
            per_request = first.bench_s / first.requests if first.status == "ok" else 0.0
            self.state.price_fixed_s = first.total_s - first.bench_s
            self.state.price_per_request_s = per_request
            self.state.mode = search.choose_mode(self.state.budget_s, len(points), full,
                                                 self.price())
            self.state.save(self.out_dir)
        if self.state.mode == GRID:
            for point in points[1:]:
                self.point(point, 0, full)
            return
        current, rung = points, 0
        while True:
            requests = search.rung_requests(rung, len(points), full)
            # At rung 0 the first point's full measurement is found and stands for it.
            measured = [self.point(p, rung, requests) for p in current]
            ok = sorted((m for m in measured if m is not None and m.status == "ok"),
                        key=_rank_key)
            if len(current) <= 1 or not ok:
                return
            current = [m.point for m in ok[:search.survivors(len(current))]]
            rung += 1


def _rank_key(m: Measurement) -> tuple[float, float]:
    return (m.tpot_p50_ms if m.tpot_p50_ms is not None else float("inf"),
            -(m.output_tokens_per_s or 0.0))


def best(state: TuneState) -> Measurement | None:
    """The best point of the highest rung with a successful measurement."""
    ok = [m for m in state.measurements if m.status == "ok"]
    if not ok:
        return None
    top = max(m.rung for m in ok)
    return min((m for m in ok if m.rung == top), key=_rank_key)


def plan(request: TuneRequest, deployment: Deployment) -> tuple[list[search.Knob], list[Point]]:
    """The knobs and the grid `tune` searches; UsageError (exit 2) before anything runs."""
    knobs = [search.parse_param(text, deployment.server) for text in request.params]
    return knobs, search.grid(knobs, budgeted=request.settings.budget_minutes is not None)


def _recorded(asked: TuneSettings, before: TuneSettings | None) -> TuneSettings:
    """The settings the state records: a resume without --budget keeps the budget it had."""
    if asked.budget_minutes is None and before is not None:
        return asked.model_copy(update={"budget_minutes": before.budget_minutes})
    return asked


def tune(request: TuneRequest, deployment: Deployment, *, runner: PointRunner, clock: Clock,
         plot: PlotWriter, on_start: OnStart = lambda *_: None,
         on_done: OnDone = lambda _: None) -> TuneResult:
    knobs, points = plan(request, deployment)
    asked = request.settings
    question = Question(profile=deployment.profile.name, variant=deployment.variant,
                        knobs={k.name: list(k.values) for k in knobs},
                        concurrency=asked.concurrency, requests=asked.requests,
                        input_words=asked.input_words, output_tokens=asked.output_tokens)
    budget_s = None if asked.budget_minutes is None else asked.budget_minutes * 60.0
    state = (resumed(request.out_dir, question, budget_s) if request.resume
             else TuneState(question=question, budget_s=budget_s))
    state.settings = _recorded(asked, state.settings)
    state.save(request.out_dir)
    searcher = _Search(deployment, state, runner, clock, request.out_dir, on_start, on_done)
    try:
        searcher.run(points)
    except KeyboardInterrupt:
        state.interrupted = True
        state.save(request.out_dir)
        raise Interrupted(f"tune interrupted after {len(state.measurements)} point(s); the "
                          f"state is in {request.out_dir}",
                          hint=f"continue with the same options and --resume --out "
                          f"{request.out_dir}") from None
    state.finished = True
    state.save(request.out_dir)
    winner = best(state)
    written = report.write(state, winner, deployment, request.out_dir)
    charts, note = plot(state, request.out_dir)
    return TuneResult(state=state, points=len(points), best=winner, out_dir=request.out_dir,
                      written=written + charts, plot_note=note)
