"""The simulated scheduler: admission, time to first token, token pacing, live KV state.

Token times are scheduled against absolute deadlines on the loop's monotonic clock
(deadline_k+1 = deadline_k + ITL), never as accumulated sleeps, so a late wake-up (a busy loop
at concurrency 64) does not stretch the next interval and the mean inter-token latency a client
measures stays the configured one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from opsctl.sim.config import Behaviour
from opsctl.sim.generate import Plan
from opsctl.sim.metrics import SglangMetrics

# KV pool size reported by the simulator: the FP8 KV pool of the seed deployment
# (495,552 tokens; shared/reference/seed-gather-then-cast.md).
SIM_MAX_TOTAL_NUM_TOKENS = 495552
THROUGHPUT_WINDOW_SECONDS = 5


@dataclass(frozen=True)
class TokenEvent:
    """One generated token as the API layer sees it."""

    position: int
    token_id: int
    text: str
    completion_tokens: int
    finish_reason: dict[str, Any] | None
    first_token_latency: float | None  # set on the first token only


@dataclass(frozen=True)
class RequestTimes:
    """Wall-clock stamps for sglang's meta_info (request_received_ts etc.)."""

    received_wall: float
    received: float  # loop clock


class _ThroughputWindow:
    """Generated tokens per second over the last few whole seconds (sglang:gen_throughput)."""

    def __init__(self, window: int) -> None:
        self._window = window
        self._counts: deque[list[int]] = deque()

    def add(self, now: float, tokens: int = 1) -> None:
        second = int(now)
        if self._counts and self._counts[-1][0] == second:
            self._counts[-1][1] += tokens
        else:
            self._counts.append([second, tokens])
        self._prune(second)

    def rate(self, now: float) -> float:
        second = int(now)
        self._prune(second)
        done = sum(count for sec, count in self._counts if sec < second)
        return done / self._window

    def _prune(self, second: int) -> None:
        while self._counts and self._counts[0][0] < second - self._window:
            self._counts.popleft()


class Engine:
    """Runs requests with the current Behaviour and reports them to the metrics."""

    def __init__(
        self,
        behaviour: Callable[[], Behaviour],
        metrics: SglangMetrics | None,
        max_running_requests: int | None,
        graph_max_bs: int | None = None,
    ) -> None:
        self._behaviour = behaviour
        self.graph_max_bs = graph_max_bs  # --cuda-graph-max-bs: larger batches run eager
        self._metrics = metrics
        self._slots = (
            asyncio.Semaphore(max_running_requests) if max_running_requests else None
        )
        self._running = 0
        self._queued = 0
        self._used_tokens = 0
        self._throughput = _ThroughputWindow(THROUGHPUT_WINDOW_SECONDS)
        if metrics is not None:
            metrics.bind_scheduler(self)

    # -- SchedulerView --------------------------------------------------------------------------

    def running(self) -> int:
        return self._running

    def queued(self) -> int:
        return self._queued

    def used_tokens(self) -> int:
        pinned = self._behaviour().kv_usage
        if pinned is not None:
            return round(pinned * SIM_MAX_TOTAL_NUM_TOKENS)
        return min(self._used_tokens, SIM_MAX_TOTAL_NUM_TOKENS)

    def token_usage(self) -> float:
        pinned = self._behaviour().kv_usage
        if pinned is not None:
            return pinned
        return min(self._used_tokens / SIM_MAX_TOTAL_NUM_TOKENS, 1.0)

    def spec_accept_length(self) -> float:
        return self._behaviour().spec_accept_length

    def gen_throughput(self) -> float:
        return self._throughput.rate(time.monotonic())

    def max_total_num_tokens(self) -> int:
        return SIM_MAX_TOTAL_NUM_TOKENS

    # -- requests -------------------------------------------------------------------------------

    @staticmethod
    def now_times() -> RequestTimes:
        return RequestTimes(received_wall=time.time(), received=asyncio.get_running_loop().time())

    async def generate(
        self, plan: Plan, prompt_tokens: int, stream: bool, times: RequestTimes
    ) -> AsyncGenerator[TokenEvent, None]:
        """Yield the plan's tokens on schedule; closing the iterator early counts as an abort."""
        loop = asyncio.get_running_loop()
        await self._admit()
        admitted = loop.time()
        if self._metrics is not None:
            self._metrics.observe_queue_time(admitted - times.received)
        self._running += 1
        self._used_tokens += prompt_tokens
        produced = 0
        finished = False
        try:
            behaviour = self._behaviour()
            if behaviour.fault == "hang":
                await loop.create_future()  # never resolves; ends only by cancellation
            deadline = admitted + behaviour.ttft_seconds()
            first_at = last_at = 0.0
            steps = behaviour.step_sizes()
            left_in_step = step_size = 1  # the first token is the prefill's
            for position in range(plan.total):
                await _sleep_until(loop, deadline)
                now = loop.time()
                token_id, text = plan.token(position)
                produced += 1
                self._used_tokens += 1
                self._throughput.add(time.monotonic())
                first_latency = None
                if position == 0:
                    first_at = now
                    first_latency = self._observe_first(now - times.received, stream)
                step_end = left_in_step == 1 or position == plan.total - 1
                if position and step_end:
                    self._observe_step(now - last_at, step_size - left_in_step + 1)
                if step_end:
                    last_at = now
                finish = None
                if position == plan.total - 1:
                    finish = plan.finish_reason()
                    finished = True
                    self._observe_finished(plan, prompt_tokens, stream, times, first_at, now)
                yield TokenEvent(position, token_id, text, produced, finish, first_latency)
                left_in_step -= 1
                # a decode step ends: the next one's tokens come one ITL later
                if left_in_step == 0:
                    left_in_step = step_size = next(steps)
                    deadline += self._behaviour().itl_seconds(self._running, self.graph_max_bs)
        finally:
            self._running -= 1
            self._used_tokens -= prompt_tokens + produced
            if self._slots is not None:
                self._slots.release()
            if not finished and self._metrics is not None:
                self._metrics.observe_aborted()

    def _observe_first(self, latency: float, stream: bool) -> float:
        if self._metrics is not None:
            self._metrics.observe_time_to_first_token(latency, stream)
        return latency

    def _observe_step(self, gap: float, made: int) -> None:
        """As sglang: a step's gap split evenly over the tokens it produced
        (0.5.23 observability/metrics_collector.py:2161-2173)."""
        if self._metrics is None:
            return
        for _ in range(made):
            self._metrics.observe_inter_token_latency(gap / made)

    async def _admit(self) -> None:
        if self._slots is None:
            return
        self._queued += 1
        try:
            await self._slots.acquire()
        finally:
            self._queued -= 1

    def _observe_finished(
        self,
        plan: Plan,
        prompt_tokens: int,
        stream: bool,
        times: RequestTimes,
        first_at: float,
        finished_at: float,
    ) -> None:
        if self._metrics is None:
            return
        tpot = None
        if plan.total > 1 and finished_at > first_at:
            tpot = (finished_at - first_at) / (plan.total - 1)
        self._metrics.observe_finished(
            prompt_tokens=prompt_tokens,
            completion_tokens=plan.total,
            e2e_seconds=finished_at - times.received,
            time_per_output_token=tpot,
            stream=stream,
        )


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    """Sleep until the loop's clock reaches `deadline` (at once when it has)."""
    delay = deadline - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
