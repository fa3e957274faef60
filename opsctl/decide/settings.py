"""The settings of `decide`, one model, its defaults written here only.

The CLI's option defaults and DecideRequest read them from DECIDE_DEFAULTS, and decide.json
records the settings a run was asked to use (DecideReport.settings).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class DecideSettings(BaseModel):
    """What decide runs for each variant and how it judges (`opsctl decide`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repeats: int = 2  # sweeps per variant, interleaved A B A B ...
    margin_percent: float = 3.0  # throughputs closer than this (percent) are a tie
    concurrency: tuple[int, ...] = (1, 8, 32, 64)  # the bench sweep's levels
    requests_per_level: int | None = None  # None: bench's default, max(16, 4 x concurrency)
    skip_eval: bool = False  # smoke without GSM8K and the long-context probes
    timeout_s: float | None = None  # readiness of each variant; None: the profile's

    @property
    def margin(self) -> float:
        """The margin as a fraction (the verdict's and decide.json's `margin`)."""
        return self.margin_percent / 100.0


DECIDE_DEFAULTS = DecideSettings()
