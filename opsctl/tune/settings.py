"""The settings of `tune`, one model, its defaults written here only.

The CLI's option defaults, TuneRequest and the point runner read them from TUNE_DEFAULTS, and
the state file and tune.md record the settings a run used (TuneState.settings). Tune's points
are short benches under their own defaults (one level, fewer requests, shorter outputs than
`bench`'s); what is the same as bench's (prompt length, the per-request timeout) is bench's
value, read from BenchSettings, not written again.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from opsctl.traffic.settings import BENCH_DEFAULTS


class TuneSettings(BaseModel):
    """What each point's bench sends and how long the search may take (`opsctl tune`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int = 8  # each point's bench level (the load you serve)
    requests: int = 32  # measured requests per full point (halving rungs use fewer)
    input_words: int = BENCH_DEFAULTS.input_words
    output_tokens: int = 128
    request_timeout_s: float = BENCH_DEFAULTS.request_timeout_s
    budget_minutes: float | None = None  # the whole search; None: the full grid, no halving


TUNE_DEFAULTS = TuneSettings()
