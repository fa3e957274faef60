"""Client worker processes: one phase of a level split across several event loops.

One event loop times a chunk when it gets to it; when the loop is busy with other streams'
chunks, that wait is read as server latency. At high concurrency a level is therefore split
across `WorkerPool` processes (started once per sweep as fresh interpreters, so none inherits
the parent's loop or threads, nor runs the parent's `__main__` as multiprocessing's spawn would:
a script calling `sweep` needs no `if __name__ == "__main__"` guard), each with its own loop,
its own client and its share of the level:

- streams: the level's concurrency split as evenly as possible (no worker gets none);
- requests: a fixed count is split in proportion to each worker's streams, in contiguous index
  blocks; an open-ended one (`--duration` alone) interleaves indexes (worker i of k sends
  start + i, start + i + k, ...), so prompts stay distinct;
- arrivals: a closed loop per worker; Poisson at the rate in proportion to its streams, worker
  i drawing from seed + i x SEED_STRIDE (independent Poisson streams add up to one at the whole
  rate), each worker capping its own share of the concurrency.

Times come back as `time.perf_counter()` readings from several processes and are compared:
on Linux perf_counter is `clock_gettime(CLOCK_MONOTONIC)` (`time.get_clock_info`), one clock
for the whole system. CPU is each worker's `time.process_time()` over its phase, plus the
parent's; the level reports the sum and the busiest process's share.

Stopping: workers run in a process group of their own, so a terminal's Ctrl-C reaches only the
parent (a worker still importing would otherwise print a KeyboardInterrupt traceback; a running
one also ignores SIGINT), and the parent decides: on cancellation (Ctrl-C, the sweep's
deadline) it tells each busy worker to stop, gives them STOP_GRACE_S to report what finished,
and re-raises. `close` asks the workers
to exit, then terminates and kills what is left; a worker whose parent is gone (killed, or
exited without `close`) sees its socket close and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from opsctl.traffic.bench.arrival import Arrival
from opsctl.traffic.bench.levels import InProcess, Phase, PhasePlan, RequestSpec
from opsctl.traffic.client import ClientFactory

STOP_GRACE_S = 5.0  # stopped workers report what finished within this
EXIT_GRACE_S = 2.0  # then `close` terminates, then kills
SEED_STRIDE = 1_000_003
# The worker's command: a fresh interpreter, its socket to the parent as a file descriptor.
_CHILD = (
    "import sys; from opsctl.traffic.bench.workers import worker_main; "
    "worker_main(int(sys.argv[1]))"
)


class WorkerDied(RuntimeError):
    """A client worker process ended without reporting its phase (opsctl's bug, or the OS)."""


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs to build its own client and send the same requests (picklable)."""

    base_url: str
    api_key: str | None
    timeout_s: float
    max_connections: int
    spec: RequestSpec
    client_factory: ClientFactory


def shares(total: int, weights: list[int]) -> list[int]:
    """`total` split in proportion to `weights`, largest remainders first; sums to `total`."""
    whole = sum(weights)
    parts = [total * weight // whole for weight in weights]
    by_remainder = sorted(range(len(weights)), key=lambda i: -(total * weights[i] % whole))
    for index in by_remainder[:total - sum(parts)]:
        parts[index] += 1
    return parts


def split(plan: PhasePlan, workers: int) -> list[PhasePlan]:
    """One plan per worker (at most one per stream); see the module docstring."""
    if plan.arrival.schedule_s:  # a trace's times are one sequence: one process replays it
        return [plan]
    streams = shares(plan.concurrency, [1] * max(1, min(workers, plan.concurrency)))
    count = len(streams)
    arrival = plan.arrival
    rates = [arrival.rate * share / plan.concurrency if arrival.rate else None
             for share in streams]
    arrivals = [Arrival(rate=rate, duration_s=arrival.duration_s,
                        seed=arrival.seed + SEED_STRIDE * i) for i, rate in enumerate(rates)]
    if plan.count is None:
        return [PhasePlan(plan.start + plan.stride * i, None, share, arrivals[i],
                          plan.stride * count) for i, share in enumerate(streams)]
    counts, first, plans = shares(plan.count, streams), plan.start, []
    for i, share in enumerate(streams):
        plans.append(PhasePlan(first, counts[i], share, arrivals[i], plan.stride))
        first = plans[-1].after(counts[i])
    return plans


# --- the worker process ----------------------------------------------------------------------

def worker_main(fd: int) -> None:
    """A client process: its setup first, then phases for the parent until told to exit or
    the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its workers
    conn = Connection(fd)
    try:
        setup = conn.recv()
    except (EOFError, OSError):
        return  # the parent went away before the worker started
    asyncio.run(_serve(conn, setup))


def _send(conn: Connection, message: tuple[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the parent is gone: the inbox sees it next
        conn.send(message)


async def _serve(conn: Connection, setup: WorkerSetup) -> None:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[str, Any] | None] = asyncio.Queue()

    def readable() -> None:
        try:
            while conn.poll():
                inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            inbox.put_nowait(None)

    loop.add_reader(conn.fileno(), readable)
    task: asyncio.Task[None] | None = None
    async with setup.client_factory(setup.base_url, setup.api_key,
                                    max_connections=setup.max_connections,
                                    timeout_s=setup.timeout_s) as client:
        runner = InProcess(client, setup.spec)
        while (message := await inbox.get()) is not None and message[0] != "exit":
            if message[0] == "phase":
                task = asyncio.create_task(_phase(conn, runner, message[1]))
                # A phase that crashed (opsctl's bug) ends the worker, with its traceback: the
                # parent sees the socket close and names the worker, instead of waiting on it.
                task.add_done_callback(
                    lambda done: None if done.cancelled() or done.exception() is None
                    else inbox.put_nowait(None))
            elif message[0] == "stop" and task is not None:
                task.cancel()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error


async def _phase(conn: Connection, runner: InProcess, plan: PhasePlan) -> None:
    phase = Phase()
    with contextlib.suppress(asyncio.CancelledError):  # stopped: report what finished
        await runner.run(plan, phase, lambda: _send(conn, ("done", None)))
    for result in phase.batch.results:
        result.text = result.reasoning = ""  # bench reads no text: do not ship it back
    _send(conn, ("phase", phase))


# --- the parent's side -----------------------------------------------------------------------

@dataclass
class _Worker:
    name: str
    process: subprocess.Popen[bytes]
    conn: Connection
    alive: bool = True
    waiting: asyncio.Future[Phase] | None = None
    on_done: Callable[[], None] | None = None


class WorkerPool:
    """`count` client processes for one sweep; use as a context manager inside its loop."""

    def __init__(self, setup: WorkerSetup, count: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._workers: list[_Worker] = []
        # The workers import what this process imports, from where it imports it.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
        try:
            for index in range(count):
                ours, theirs = socket.socketpair()
                with theirs:
                    process = subprocess.Popen(
                        [sys.executable, "-c", _CHILD, str(theirs.fileno())],
                        pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, process_group=0)
                self._workers.append(_Worker(f"client worker {index}", process,
                                             Connection(ours.detach())))
            for worker in self._workers:  # all started first: they import side by side
                worker.conn.send(setup)
                self._loop.add_reader(worker.conn.fileno(), self._readable, worker)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def runner(self, workers: int) -> PoolRunner:
        return PoolRunner(self, min(workers, len(self._workers)))

    def _readable(self, worker: _Worker) -> None:
        try:
            while worker.conn.poll():
                kind, payload = worker.conn.recv()
                if kind == "done" and worker.on_done is not None:
                    worker.on_done()
                elif kind == "phase" and worker.waiting is not None and not worker.waiting.done():
                    worker.waiting.set_result(payload)
        except (EOFError, OSError):
            self._gone(worker)

    def _gone(self, worker: _Worker) -> None:
        if worker.alive:
            worker.alive = False
            self._loop.remove_reader(worker.conn.fileno())
        if worker.waiting is not None and not worker.waiting.done():
            with contextlib.suppress(subprocess.TimeoutExpired):  # its socket closed: exiting
                worker.process.wait(1.0)
            worker.waiting.set_exception(WorkerDied(
                f"{worker.name} ended without reporting its phase "
                f"(exit code {worker.process.poll()})"))

    async def run(self, plan: PhasePlan, workers: int, phase: Phase,
                  on_done: Callable[[], None] | None) -> None:
        parts = split(plan, workers)
        busy = self._workers[:len(parts)]
        phase.started, cpu = time.perf_counter(), time.process_time()
        self._hand_out(busy, parts, on_done)
        waiting = [worker.waiting for worker in busy if worker.waiting is not None]
        try:
            await asyncio.wait(waiting)
        except asyncio.CancelledError:
            _stop_unfinished(busy)
            await asyncio.wait(waiting, timeout=STOP_GRACE_S)
            raise
        finally:
            for worker in busy:
                worker.on_done = None
            _merge(phase, [f.result() for f in waiting if f.done() and f.exception() is None],
                   time.process_time() - cpu, plan.start)
        for future in waiting:
            if (error := future.exception()) is not None:
                raise error

    def _hand_out(self, busy: list[_Worker], parts: list[PhasePlan],
                  on_done: Callable[[], None] | None) -> None:
        """Each busy worker its part of the phase (one already gone fails its wait at once)."""
        for worker, part in zip(busy, parts, strict=True):
            worker.waiting, worker.on_done = self._loop.create_future(), on_done
            if worker.alive:
                _send(worker.conn, ("phase", part))
            else:
                self._gone(worker)

    def close(self) -> None:
        """Ask every worker to exit; terminate, then kill, what has not within the grace."""
        for worker in self._workers:
            if worker.alive:
                worker.alive = False
                self._loop.remove_reader(worker.conn.fileno())
                _send(worker.conn, ("exit", None))
        deadline = time.monotonic() + EXIT_GRACE_S
        for worker in self._workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(max(0.0, deadline - time.monotonic()))
        for worker in self._workers:
            if worker.process.poll() is None:
                worker.process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.process.wait(1.0)
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
            worker.conn.close()


def _stop_unfinished(busy: list[_Worker]) -> None:
    """Ask each live worker still in its phase to stop sending."""
    for worker in busy:
        if worker.alive and worker.waiting is not None and not worker.waiting.done():
            _send(worker.conn, ("stop", None))


def _merge(phase: Phase, reports: list[Phase], parent_cpu_s: float, start: int) -> None:
    """The workers' reports folded into `phase`: results, counts, wall time, CPU."""
    for report in reports:
        phase.batch.results.extend(report.batch.results)
        phase.batch.sent += report.batch.sent
        phase.batch.in_flight += report.batch.in_flight
    phase.ended = time.perf_counter()
    if reports:  # the workers' own clocks: the same CLOCK_MONOTONIC as the parent's
        phase.started = min(report.started for report in reports)
        phase.ended = max(report.ended or phase.ended for report in reports)
    wall = phase.wall()
    phase.cpu_s = parent_cpu_s + sum(report.cpu_s for report in reports)
    phase.busiest_share = max([report.busiest_share for report in reports]
                              + [parent_cpu_s / wall if wall > 0 else 0.0])
    phase.next_index = max([report.next_index for report in reports], default=start)


class PoolRunner:
    """A `levels.Runner` that splits each phase across `workers` of the pool."""

    def __init__(self, pool: WorkerPool, workers: int) -> None:
        self.pool, self.workers = pool, workers

    async def run(self, plan: PhasePlan, phase: Phase, on_done: Callable[[], None] | None
                  ) -> None:
        await self.pool.run(plan, self.workers, phase, on_done)
