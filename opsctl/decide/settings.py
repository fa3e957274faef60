"""The settings of `decide`, one model: each knob's name, type, default, bounds and help are
written here only (what equals bench's, the requests per level, is bench's own field).

The CLI's options read their help, bounds and defaults from these fields (cli/knobs.py),
DecideRequest reads DECIDE_DEFAULTS, and decide.json records the settings a run was asked to
use (DecideReport.settings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from opsctl.config.profile_checks import MAX_READINESS_SECONDS
from opsctl.traffic.payload import Api
from opsctl.traffic.settings import WORKLOAD_KNOBS, BenchSettings, DatasetName, bench_knob

_CONCURRENCY = (1, 8, 32, 64)
_MARGIN_PERCENT = 3.0
# --quick: these knobs' values unless given (one repeat, two short levels, short answers).
QUICK: dict[str, Any] = {"repeats": 1, "concurrency": (1, 8), "requests_per_level": 8,
                         "output_tokens": 64}


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
    quick: bool = Field(False, description=(
        "A short run: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()) + ", unless those "
        "options are given (a decide on the simulator in minutes, not hours)."))
    # The workload each sweep sends: bench's own knobs (traffic.settings.WORKLOAD_KNOBS).
    input_words: int = bench_knob("input_words")
    output_tokens: int = bench_knob("output_tokens")
    api: Api = bench_knob("api")
    dataset: DatasetName | None = bench_knob("dataset")
    dataset_path: Path | None = bench_knob("dataset_path")
    tokenizer: Path | None = bench_knob("tokenizer")
    seed: int = bench_knob("seed")
    gsp_groups: int = bench_knob("gsp_groups")
    gsp_prompts_per_group: int = bench_knob("gsp_prompts_per_group")
    gsp_prefix_len: int = bench_knob("gsp_prefix_len")
    multi_turn: int = bench_knob("multi_turn")
    trace_scale: float = bench_knob("trace_scale")
    range_ratio: float = bench_knob("range_ratio")
    length_pairs: tuple[tuple[int, int], ...] = bench_knob("length_pairs")
    extra_request_body: dict[str, Any] | None = bench_knob("extra_request_body")

    def sweep(self) -> BenchSettings:
        """What each sweep runs with: the levels, the requests and the workload."""
        return BenchSettings(concurrency=self.concurrency,
                             requests_per_level=self.requests_per_level,
                             **{name: getattr(self, name) for name in WORKLOAD_KNOBS})

    @property
    def margin(self) -> float:
        """The margin as a fraction (the verdict's and decide.json's `margin`)."""
        return self.margin_percent / 100.0


DECIDE_DEFAULTS = DecideSettings()
