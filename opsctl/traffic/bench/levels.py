"""One concurrency level of a sweep: warm-up, then the measured phase, then its LevelResult.

A level runs its phases through a `Runner`: `InProcess` sends from the sweep's own event loop;
opsctl.traffic.bench.workers' pool splits a phase across client processes, each with its own loop,
when one loop would be busy enough to delay the very chunks it times (`client_workers`).
Either way the level counts the CPU of every client process over its measured phase, reports
it per streamed token, and flags the level `client_bound` when the busiest client process used
most of a core or all of them most of the usable cores (opsctl.traffic.bench.stats.with_client_cpu).

After a whole level, `sweep_end` says whether the sweep should stop there, and why: the server
saturated (BenchSettings.saturation_gain: output throughput barely rose over the previous
level's while E2E p50 rose more) or too many requests failed (max_error_rate).

Warm-up: `concurrency` requests at once, excluded from the statistics (their failures still
count); with several workers each warms its own connections with its share. A level whose
warm-up fails entirely is aborted. Cancelled (the sweep's deadline, Ctrl-C), a level still
appends what finished, marked `CUT_SHORT` (the caller says by what).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from opsctl.traffic.bench.arrival import Arrival, Batch, drive
from opsctl.traffic.bench.plan import BenchOptions, Progress
from opsctl.traffic.bench.records import record_level
from opsctl.traffic.bench.report import LevelResult
from opsctl.traffic.bench.server_sampler import LevelSampler
from opsctl.traffic.bench.stats import summarize, with_client_cpu
from opsctl.traffic.bench.workloads import Workload
from opsctl.traffic.client import Api, RequestResult, TrafficClient, request_body, stream_generate

if TYPE_CHECKING:
    from opsctl.traffic.settings import BenchSettings

CUT_SHORT = "cut short"
# The automatic rule: one client process per this many concurrent streams (at the 20-30 us of
# CPU per streamed token measured on a 2-core development machine, 64 streams at a 5 ms ITL keep
# one process near a third of a core, where its mean ITL stayed within 1% of the server's own),
# and never more processes than the usable cores less one (left for the sweep's own loop and
# for a server on the same host).
STREAMS_PER_WORKER = 64


def usable_cores() -> int:
    """The cores this process may run on (its affinity, so `taskset` is honoured)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def client_workers(concurrency: int, requested: int | None, cores: int) -> int:
    """Client processes for a level: `requested` (never more than the level's streams), or
    ceil(concurrency / STREAMS_PER_WORKER) capped at max(1, cores - 1)."""
    if requested is not None:
        return max(1, min(requested, concurrency))
    return max(1, min(math.ceil(concurrency / STREAMS_PER_WORKER), cores - 1))


@dataclass(frozen=True)
class RequestSpec:
    """How request number i is sent; picklable, so a worker process sends the same requests."""

    api: Api
    model: str
    temperature: float
    ignore_eos: bool
    timeout_s: float
    workload: Workload
    extra_body: dict[str, Any] | None = None  # --extra-request-body, merged into every body

    sessions: Sessions = field(default_factory=lambda: Sessions(), compare=False)

    def for_phase(self, plan: PhasePlan) -> RequestSpec:
        """Multi-turn: the phase's own sessions (numbered from its first request, as many side
        by side as its concurrency) with fresh histories; single requests: this spec."""
        if self.workload.spec.turns <= 1:
            return self
        return replace(self, workload=self.workload.for_phase(plan.start, plan.concurrency),
                       sessions=Sessions())

    async def send(self, client: TrafficClient, index: int) -> RequestResult:
        item = self.workload.item(index)
        body = request_body(self.api, self.model, item.prompt, max_tokens=item.output_tokens,
                            stream=True, temperature=self.temperature,
                            ignore_eos=self.ignore_eos) | (self.extra_body or {})
        if self.workload.spec.turns <= 1:
            return await stream_generate(client, self.api, body, timeout_s=self.timeout_s)
        session, turn = self.workload.session_turn(index)
        history = await self.sessions.before(session, turn)
        body["messages"] = history + body["messages"]
        result = RequestResult(ok=False)  # what the next turn sees if this one is cancelled
        try:
            result = await stream_generate(client, self.api, body, timeout_s=self.timeout_s)
        finally:  # the next turn goes on, with this turn's answer (empty when it failed)
            self.sessions.after(session, turn, history + body["messages"][-1:] + [
                {"role": "assistant", "content": result.text}], self.workload.spec.turns)
        return result


class Sessions:
    """Multi-turn histories of one client process: a turn waits for its session's previous
    turn (sent earlier, bounded by its own timeout) and takes the history it left."""

    def __init__(self) -> None:
        self._history: dict[int, list[dict[str, str]]] = {}
        self._done: dict[tuple[int, int], asyncio.Event] = {}

    def _event(self, session: int, turn: int) -> asyncio.Event:
        return self._done.setdefault((session, turn), asyncio.Event())

    async def before(self, session: int, turn: int) -> list[dict[str, str]]:
        if turn == 0:
            return []
        await self._event(session, turn - 1).wait()
        self._done.pop((session, turn - 1), None)
        return self._history.pop(session, [])

    def after(self, session: int, turn: int, history: list[dict[str, str]], turns: int) -> None:
        if turn + 1 < turns:  # the last turn's history is not kept
            self._history[session] = history
        self._event(session, turn).set()


@dataclass(frozen=True)
class PhasePlan:
    """The requests of a phase: indexes start, start + stride, ... (`count` of them, or until
    the arrival's duration ends), at most `concurrency` in flight, sent as `arrival` says."""

    start: int
    count: int | None
    concurrency: int
    arrival: Arrival = Arrival()
    stride: int = 1

    def indexes(self) -> Iterator[int]:
        steps = range(self.count) if self.count is not None else itertools.count()
        return (self.start + self.stride * step for step in steps)

    def after(self, sent: int) -> int:
        """The first index past the `sent` requests taken from this plan."""
        return self.start + self.stride * sent


@dataclass
class Phase:
    """What a phase did so far: kept up to date, so an interrupted phase still reports."""

    batch: Batch = field(default_factory=Batch)
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    cpu_s: float = 0.0  # every client process, over the phase
    busiest_share: float = 0.0  # the busiest client process's CPU over the phase's wall time
    next_index: int = 0

    def wall(self) -> float:
        return (self.ended if self.ended is not None else time.perf_counter()) - self.started


class Runner(Protocol):
    """Runs a phase's plan into `phase`; on cancellation `phase` holds what finished."""

    workers: int

    async def run(self, plan: PhasePlan, phase: Phase, on_done: Callable[[], None] | None
                  ) -> None: ...


class InProcess:
    """Every request of a phase from this event loop and this client."""

    workers = 1

    def __init__(self, client: TrafficClient, spec: RequestSpec) -> None:
        self.client, self.spec = client, spec

    async def run(self, plan: PhasePlan, phase: Phase, on_done: Callable[[], None] | None
                  ) -> None:
        phase.started, cpu = time.perf_counter(), time.process_time()
        try:
            await drive(
                functools.partial(self.spec.for_phase(plan).send, self.client),
                plan.indexes(),
                plan.concurrency,
                plan.arrival,
                phase.batch,
                on_done,
            )
        finally:
            phase.ended = time.perf_counter()
            phase.cpu_s = time.process_time() - cpu
            phase.busiest_share = phase.cpu_s / phase.wall() if phase.wall() > 0 else 0.0
            phase.next_index = plan.after(phase.batch.sent)


def sweep_end(previous: LevelResult | None, level: LevelResult,
              settings: BenchSettings) -> str | None:
    """Why the sweep ends after `level` (None: it goes on)."""
    sent = level.requests + level.warmup_requests
    failed = level.failed + level.warmup_failed
    ceiling = settings.max_error_rate
    if ceiling is not None and sent and failed / sent > ceiling:
        return (f"error rate {failed / sent:.1%} ({failed} of {sent} requests) above the "
                f"{ceiling:.1%} ceiling")
    gain = settings.saturation_gain
    if gain is None or previous is None or previous.aborted:
        return None
    before, after = previous.e2e_ms.p50, level.e2e_ms.p50
    if not previous.output_tokens_per_s or not before or after is None:
        return None
    rise = level.output_tokens_per_s / previous.output_tokens_per_s - 1
    slower = after / before - 1
    if rise < gain and slower > gain:
        return (f"saturated: output throughput {rise:+.1%} over concurrency "
                f"{previous.concurrency} while E2E p50 rose {slower:+.1%} (saturation_gain "
                f"{gain:g})")
    return None


# Opens a sampler of the server's own figures around a measured phase (server_sampler).
SampleServer = Callable[[], AbstractAsyncContextManager[LevelSampler]]


async def run_level(
    runner: Runner, label: str, concurrency: int, options: BenchOptions, first_index: int,
    progress: Progress | None, levels: list[LevelResult], sample: SampleServer | None = None,
) -> int:
    """Warm-up then the measured phase; appends the level to `levels` (also when cancelled by
    the deadline or Ctrl-C, with what finished) and returns the next prompt index. With
    `sample`, the server's own figures over the measured phase ride along in the level."""
    timed = options.arrival.duration_s is not None
    total = options.requests_at(concurrency)
    warmup, measured = Phase(), Phase()
    start_index = options.arrival.first_of_cycle(first_index + concurrency)
    done = 0
    sampler: LevelSampler | None = None

    def one_done() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(label, concurrency, done, 0 if timed else total)

    def level(aborted: str | None = None) -> LevelResult:
        wall = measured.wall()
        result = summarize(concurrency, measured.batch.results, warmup.batch.results, wall,
                           options.api_key, aborted=aborted,
                           in_flight_cut=warmup.batch.in_flight + measured.batch.in_flight,
                           slo=options.slo)
        result = with_client_cpu(result, measured.cpu_s, wall,
                                 busiest_share=measured.busiest_share, workers=runner.workers,
                                 cores=usable_cores())
        if sampler is not None:
            result.server = sampler.result()
        kept = record_level(measured.batch.results, measured.started, options.api_key)
        result.requests_note = kept.note()
        result._records = kept
        return result

    try:
        await runner.run(PhasePlan(first_index, concurrency, concurrency), warmup, None)
        if warmup.batch.results and not any(r.ok for r in warmup.batch.results):
            first = warmup.batch.results[0]
            levels.append(level(f"warm-up failed: none of {len(warmup.batch.results)} "
                                f"request(s) succeeded ({first.error_kind}: {first.error})"))
            return start_index
        if progress:
            progress(label, concurrency, 0, 0 if timed else total)
        count = None if timed and options.settings.requests_per_level is None else total
        plan = PhasePlan(start_index, count, concurrency, options.arrival)
        # The sampler's end scrape falls after the phase's wall time.
        async with sample() if sample is not None else nullcontext() as sampler:
            measured.started = time.perf_counter()  # the wall time a cut-short level reports
            await runner.run(plan, measured, one_done)
    except BaseException:
        levels.append(level(CUT_SHORT))  # Ctrl-C, the deadline, or a client worker that died
        raise
    whole = level()
    whole.sweep_end = sweep_end(levels[-1] if levels else None, whole, options.settings)
    levels.append(whole)
    return measured.next_index
