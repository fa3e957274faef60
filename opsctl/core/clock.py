"""Time as a collaborator: the wall clock, a monotonic clock and sleeping, behind one Protocol.

Loops that wait (readiness, retries) take a `Clock` so tests drive them with a fake one and never
sleep for real.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def now(self) -> datetime:
        """Wall-clock time, timezone-aware (UTC)."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK: Clock = SystemClock()
