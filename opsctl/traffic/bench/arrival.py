"""When bench sends its requests: a closed loop, Poisson arrivals or a trace's recorded arrival
times, under a concurrency cap.

Closed loop: `concurrency` workers each keep one request in flight until the work runs out.
Poisson (`rate` requests/s): arrival times are drawn from a seeded exponential distribution,
so two runs with the same seed send on the same schedule; a request whose time has come waits
while `concurrency` requests are in flight (the cap), as sglang.bench_serving's
`--max-concurrency` does. A trace (`--dataset-name mooncake-trace`) sends each request at its
recorded time, also under the cap. Either way `duration_s`, when given, stops sending once that many
seconds have passed since the phase began; requests already sent are awaited and counted.

The TTFT clock of each request starts when it is sent (inside `send`), never at its scheduled
arrival, so time spent waiting for the cap is not read as server latency.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field

from opsctl.core.errors import UsageError
from opsctl.traffic.client import RequestResult

Send = Callable[[int], Awaitable[RequestResult]]


@dataclass
class Batch:
    """The requests of one phase of a level: finished results, and how many are in flight."""

    results: list[RequestResult] = field(default_factory=list)
    in_flight: int = 0
    sent: int = 0


@dataclass(frozen=True)
class Arrival:
    """How requests arrive: `rate` None is the closed loop; `duration_s` None sends all work."""

    rate: float | None = None
    duration_s: float | None = None
    seed: int = 0
    # A trace's arrival times (seconds after its first request): request i goes
    # schedule_s[i % n] - schedule_s[first % n] after the phase began (wrapping past the end
    # with no gap), under the concurrency cap. None: closed loop or Poisson.
    schedule_s: tuple[float, ...] | None = None

    def describe(self) -> str:
        if self.schedule_s:
            how = (f"trace replay: {len(self.schedule_s)} recorded arrivals over "
                   f"{self.schedule_s[-1]:g} s under the concurrency cap")
        else:
            how = (f"Poisson arrivals at {self.rate:g} req/s (seed {self.seed}) under the "
                   "concurrency cap" if self.rate else "closed loop")
        return how + (f", {self.duration_s:g} s per level" if self.duration_s else "")

    def replay_s(self, count: int) -> float:
        """Seconds a trace's own arrivals take for `count` requests from its first (wrapping
        with no gap); 0 without a trace."""
        if not self.schedule_s:
            return 0.0
        cycles, rest = divmod(count, len(self.schedule_s))
        return cycles * self.schedule_s[-1] + (self.schedule_s[rest - 1] if rest else 0.0)

    def first_of_cycle(self, index: int) -> int:
        """The first request index at or after `index` that replays a trace from its first
        arrival (every level replays the trace from its start); `index` without a trace."""
        if not self.schedule_s:
            return index
        return -(-index // len(self.schedule_s)) * len(self.schedule_s)

    def gap_after(self, index: int, poisson: Iterator[float]) -> float:
        """Seconds from request `index` to the next one."""
        if not self.schedule_s:
            return next(poisson)
        times, after = self.schedule_s, (index + 1) % len(self.schedule_s)
        return 0.0 if after == 0 else times[after] - times[after - 1]


def check_replay(arrival: Arrival, counts: Iterable[int], deadline_s: float) -> None:
    """UsageError (exit 2, before anything is launched) when a trace's own arrivals for the
    levels' request counts take longer than the sweep may (`deadline_s`): bench would wait
    for them past its deadline, silently (a timestamp of 10^9 ms is 11.6 days)."""
    replay = sum(arrival.replay_s(count) for count in counts)
    if replay > deadline_s:
        raise UsageError(f"the trace's arrivals take {replay:.0f} s over the levels, beyond the "
                         f"sweep's deadline of {deadline_s:.0f} s",
                         hint="check the trace's timestamps (milliseconds), or pass "
                              "--trace-scale below 1, fewer --requests or a longer --deadline")


def poisson_gaps(rate: float, seed: int) -> Iterator[float]:
    """Seconds between successive arrivals: exponential with mean 1/rate, seeded."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    rng = random.Random(seed)
    while True:
        yield rng.expovariate(rate)


async def drive(
    send: Send, indexes: Iterable[int], concurrency: int, arrival: Arrival, batch: Batch,
    on_done: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Send one request per index as `arrival` says, at most `concurrency` at once."""
    start = clock()

    def time_left() -> bool:
        return arrival.duration_s is None or clock() - start < arrival.duration_s

    async def one(index: int) -> None:
        batch.in_flight += 1
        batch.sent += 1
        result = await send(index)
        batch.in_flight -= 1  # not on cancellation: those are counted as cut in flight
        batch.results.append(result)
        if on_done:
            on_done()

    pending = iter(indexes)
    if arrival.rate is None and not arrival.schedule_s:
        async def worker() -> None:
            for index in pending:  # a shared iterator: each index is taken by exactly one worker
                if not time_left():
                    return
                await one(index)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return
    cap = asyncio.Semaphore(concurrency)
    tasks: list[asyncio.Task[None]] = []

    async def capped(index: int) -> None:
        async with cap:
            await one(index)

    next_at = start  # the first request goes at once, each later one after its gap
    poisson = poisson_gaps(arrival.rate, arrival.seed) if arrival.rate else iter(())
    try:
        for index in pending:
            await asyncio.sleep(max(0.0, next_at - clock()))
            if not time_left():
                break
            tasks.append(asyncio.create_task(capped(index)))
            next_at += arrival.gap_after(index, poisson)
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
