"""The settings of `decide`, one model: each knob's name, type, default, bounds and help are
written here only (what equals bench's, the requests per level, is bench's own field).

The CLI's options read their help, bounds and defaults from these fields (cli/knobs.py),
DecideRequest reads DECIDE_DEFAULTS, and decide.json records the settings a run was asked to
use (DecideReport.settings).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from opsctl.config.profile_checks import MAX_READINESS_SECONDS
from opsctl.traffic.settings import bench_knob

_CONCURRENCY = (1, 8, 32, 64)
_MARGIN_PERCENT = 3.0


class DecideSettings(BaseModel):
    """What decide runs for each variant and how it judges (`opsctl decide`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repeats: int = Field(2, ge=1, le=20, description=(
        "Sweeps per variant, interleaved A B A B ... (each a fresh up -> bench -> down; the "
        "gates run in the first)."))
    margin_percent: float = Field(_MARGIN_PERCENT, ge=0.0, le=50.0, description=(
        "Percent: throughputs closer than this (or whose ratio's 95% interval holds 1) are a "
        f"tie (default {_MARGIN_PERCENT:g}; with --rescore, the run's own)."))
    concurrency: tuple[int, ...] = Field(_CONCURRENCY, description=(
        "Comma-separated bench levels (default " + ",".join(map(str, _CONCURRENCY)) + ")."))
    requests_per_level: int | None = bench_knob("requests_per_level")
    skip_eval: bool = Field(False, description=(
        "Smoke without GSM8K and the long-context probes: the gates are then start, verify "
        "and smoke's own checks only."))
    timeout_s: float | None = Field(None, ge=0.01, le=MAX_READINESS_SECONDS, description=(
        "Readiness timeout per variant in seconds (default: the profile's)."))

    @property
    def margin(self) -> float:
        """The margin as a fraction (the verdict's and decide.json's `margin`)."""
        return self.margin_percent / 100.0


DECIDE_DEFAULTS = DecideSettings()
