"""The settings of `tune`, one model, its defaults written here only.

The CLI's options (help, bounds, defaults: cli/knobs.py), TuneRequest and the point runner read
them from these fields and TUNE_DEFAULTS, and
the state file and tune.md record the settings a run used (TuneState.settings). Tune's points
are short benches under their own defaults (one level, fewer requests, shorter outputs than
`bench`'s); what is the same as bench's (prompt length, the per-request timeout) is bench's
value, read from BenchSettings, not written again.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from opsctl.traffic.settings import bench_knob


class TuneSettings(BaseModel):
    """What each point's bench sends and how long the search may take (`opsctl tune`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int = Field(8, ge=1, description=(
        "Concurrency of each point's bench (the load you serve)."))
    requests: int = Field(32, ge=4, description=(
        "Measured requests per point (halving rungs use fewer)."))
    input_words: int = bench_knob("input_words")
    output_tokens: int = Field(128, ge=2, le=1_000_000, description="Output tokens per request.")
    request_timeout_s: float = bench_knob("request_timeout_s")
    budget_minutes: float | None = Field(None, ge=0.1, le=7 * 24 * 60, description=(
        "Minutes for the whole search; when the grid does not fit, successive halving "
        "(docs/trace-and-tune.md); 0.1 to 10080 (a week)."))  # None: the full grid


TUNE_DEFAULTS = TuneSettings()
