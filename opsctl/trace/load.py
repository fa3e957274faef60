"""A steady decode load while a profile runs: the traffic room's closed loop, held open.

`bench`'s sweep at one concurrency level runs in a thread of its own (its own event loop) with
far more requests than the capture needs and long outputs, so every worker stays in decode; when
the profile is in, the loop is cancelled and what was measured is kept (the level reads "cut
short"), so the report can say what load the trace saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from opsctl.core.errors import OpsctlError
from opsctl.core.redact import redact_userinfo
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.report import VariantResult
from opsctl.traffic.bench.sweep import sweep
from opsctl.traffic.client import ClientFactory, make_client
from opsctl.traffic.settings import BENCH_DEFAULTS, BenchSettings

LABEL = "trace-load"
WAVES = 1000  # requests per worker: never the reason the load ends
JOIN_SECONDS = 30.0


@dataclass
class LoadSummary:
    """What the load did while the trace was taken."""

    concurrency: int
    completed: int = 0
    in_flight: int = 0  # cut when the profile was in
    failed: int = 0
    tpot_p50_ms: float | None = None
    error: str | None = None  # the load could not run (server away, model not found...)


@dataclass(frozen=True)
class LoadShape:
    input_words: int = 128
    output_tokens: int = 1024
    request_timeout_s: float = BENCH_DEFAULTS.request_timeout_s
    api_key: str | None = None


@contextmanager
def steady_load(base_url: str, concurrency: int, shape: LoadShape,
                client_factory: ClientFactory = make_client) -> Iterator[LoadSummary]:
    """Hold `concurrency` streaming requests in flight until the block exits."""
    summary = LoadSummary(concurrency=concurrency)
    result = VariantResult(variant=LABEL, base_url=redact_userinfo(base_url))
    options = BenchOptions(BenchSettings(concurrency=(concurrency,),
                                         requests_per_level=concurrency * WAVES,
                                         input_words=shape.input_words,
                                         output_tokens=shape.output_tokens,
                                         request_timeout_s=shape.request_timeout_s),
                           api_key=shape.api_key)
    loop = asyncio.new_event_loop()

    def run() -> None:
        try:
            loop.run_until_complete(sweep(LABEL, base_url, options, None, client_factory,
                                          result))
        except asyncio.CancelledError:
            pass
        except OpsctlError as exc:
            summary.error = exc.message
        finally:
            loop.close()

    def cancel_all() -> None:
        for task in asyncio.all_tasks(loop):
            task.cancel()

    thread = threading.Thread(target=run, name=LABEL, daemon=True)
    thread.start()
    try:
        yield summary
    finally:
        with contextlib.suppress(RuntimeError):  # the loop already closed: nothing to cancel
            loop.call_soon_threadsafe(cancel_all)
        thread.join(JOIN_SECONDS)
        levels = result.levels
        summary.completed = sum(level.completed for level in levels)
        summary.in_flight = sum(level.in_flight_cut for level in levels)
        summary.failed = sum(level.failed + level.warmup_failed for level in levels)
        summary.tpot_p50_ms = levels[-1].tpot_ms.p50 if levels else None
