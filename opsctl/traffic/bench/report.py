"""The bench report: its JSON models, the files written from it, and what its verdict means.

bench.json is the record the exporter and `--compare` tooling read; bench.md is the same run as
a table with deltas against the first variant. Both are written afresh, atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, PrivateAttr

from opsctl.core.errors import (
    EXIT_DAEMON,
    EXIT_USAGE,
    DaemonUnreachable,
    LaunchError,
    OpsctlError,
    SmokeError,
    UsageError,
)
from opsctl.core.partial import PartialReport
from opsctl.core.reports import BENCH_JSON
from opsctl.traffic.bench.server_sampler import ServerFigures
from opsctl.traffic.served import ModelResolution
from opsctl.traffic.settings import BenchSettings

SCHEMA_VERSION: Literal[2] = 2  # 2: config.settings is the BenchSettings model
CLIENT_BOUND_SHARE = 0.9  # of one core per client process: each event loop is single-threaded


class Pcts(BaseModel):
    """Milliseconds; None when nothing was measured. `std` is the population standard deviation
    (numpy's default, as sglang.bench_serving reports it)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None
    p95: float | None = None
    std: float | None = None
    max: float | None = None


class Goodput(BaseModel):
    """The measured requests that met every latency limit the profile's SLO states.

    `share` is over every measured request sent (a failure is not good), `rate_per_s` over the
    measured phase's wall time: sglang.bench_serving's slo_attainment and request_goodput.
    """

    ttft_ms: float | None  # the limits applied; None: not stated
    tpot_ms: float | None
    good: int
    share: float | None  # None when no request was measured
    rate_per_s: float
    # Per stated limit ("ttft", "tpot"): the share of measured requests meeting that one alone
    # (sglang.bench_serving's slo_attainment_by_metric); {} in reports written before it.
    by_metric: dict[str, float] = {}


class LevelResult(BaseModel):
    concurrency: int
    requests: int
    completed: int
    failed: int
    warmup_requests: int
    warmup_failed: int
    errors: dict[str, int] = {}  # error kind -> count (measured and warm-up)
    error_examples: list[str] = []
    duration_s: float
    output_tokens: int
    prompt_tokens_mean: float | None = None
    input_tokens: int | None = None  # server-counted prompt tokens, when every success had them
    input_tokens_per_s: float | None = None  # those over the measured phase's wall time
    output_tokens_per_s: float
    requests_per_s: float
    ttft_ms: Pcts
    itl_ms: Pcts
    tpot_ms: Pcts
    e2e_ms: Pcts
    token_count_source: str  # "usage", "chunks", or both joined by "+"
    text_chunks: int = 0  # chunks that carried text, against `output_tokens`
    itl_note: str | None = None  # why ITL is per chunk, split, or not measurable
    usage_flagged: int = 0  # requests whose usage disagreed with their stream (chunks counted)
    usage_notes: list[str] = []
    notes: list[str] = []  # what the load generator did not measure, and why (other drivers)
    aborted: str | None = None  # why the level stopped early (warm-up failed, deadline, Ctrl-C)
    # Why the sweep ended after this whole level (BenchSettings.saturation_gain, max_error_rate).
    sweep_end: str | None = None
    in_flight_cut: int = 0  # requests cut by opsctl when the level stopped; not counted above
    goodput: Goodput | None = None  # None: the run had no SLO to judge by
    # opsctl's own CPU seconds in the measured phase (every client process: the sweep's and
    # its `client_workers`), as a share of one core over its wall time (above 1 with several
    # workers) and per streamed output token; `client_bound` when the busiest client process
    # used more than CLIENT_BOUND_SHARE of a core, or all of them that share of the usable
    # cores: then the client, not the server, may be what limited the level.
    client_cpu_s: float | None = None
    client_cpu_share: float | None = None
    client_bound: bool = False
    client_workers: int = 1
    client_cpu_us_per_token: float | None = None
    # What the server's /metrics (and this host's nvidia-smi) said during the measured phase;
    # None: not sampled (reports written before the sampler existed load unchanged).
    server: ServerFigures | None = None
    # sglang.bench_serving's peak figures (opsctl.traffic.bench.records.peaks); None: no
    # timed success, or a driver that does not give them.
    max_output_tokens_per_s: float | None = None
    max_concurrent_requests: int | None = None
    # The level's per-request records, relative to the bench directory (bench_requests); None:
    # not recorded (another driver). `requests_note` says when the caps cut them.
    requests_file: str | None = None
    requests_note: str | None = None
    _records: Any = PrivateAttr(default=None)  # bench_requests.LevelRecords until written


class VariantResult(BaseModel):
    variant: str
    base_url: str
    launched_by_bench: bool = False
    model: ModelResolution | None = None
    levels: list[LevelResult] = []
    failed_requests: int = 0
    error: str | None = None  # the variant could not be benchmarked at all
    error_exit_code: int | None = None  # that error's exit code (2 usage, 4 unreachable/launch)
    stopped: str | None = None  # the sweep ended before its last level, and why
    # The server's GET /server_info after the sweep, as sglang.bench_serving copies it into its
    # rows (`server_info`); None: not sglang, or it did not answer.
    server_info: dict[str, Any] | None = None


class BenchConfig(BaseModel):
    """What the sweep ran with: the settings as it applied them (a trace's per-level request
    count and one client process filled in) and what the run resolved from them; each setting's
    name, type and default are BenchSettings' own, not written again here."""

    settings: BenchSettings
    sweep_deadline_s: float  # the wall-clock limit each target's sweep ran under
    temperature: float
    prompt_seed: int
    arrival: str  # how requests were sent, in words
    dataset_name: str
    workload_note: str | None  # e.g. why prompts are words, not exact tokens
    slo_ttft_ms: float | None  # the limits goodput was judged by (None: not stated)
    slo_tpot_ms: float | None
    # sglang.bench_serving's random_* arguments as this workload states them: the prompt and
    # answer lengths (None for datasets whose lengths come from the data) and the range ratio
    # (1.0: every length exact; below 1 each drawn from [length x ratio, length]).
    random_input_len: int | None
    random_output_len: int | None
    random_range_ratio: float | None
    driver: str  # what sent the load: opsctl's client, or sglang-bench


class ClientInfo(BaseModel):
    hostname: str
    platform: str
    python: str
    cpu_count: int | None


class BenchReport(PartialReport):
    """The JSON written by `opsctl bench` (schema_version bumps on any incompatible change)."""

    schema_version: Literal[2] = SCHEMA_VERSION  # a report of another version is refused
    kind: Literal["bench"] = "bench"
    started_at: str
    duration_s: float
    profile: str | None = None
    api_key: str | None = None  # masked
    config: BenchConfig
    client: ClientInfo
    variants: list[VariantResult]
    failed_requests: int
    passed: bool
    _requests: Any = PrivateAttr(default=None)  # [(path, LevelRecords)] until written


def verdict_error(report: BenchReport, out_dir: Path) -> OpsctlError | None:
    """Exit 130 (Ctrl-C) or 1 (crash) for a partial run; 4 when a variant could not be reached
    or launched (2 when the model name is ambiguous, 6 without a daemon); 5 on any failed
    request or a sweep stopped early (warm-up failed, deadline)."""
    stopped = report.stop_error("bench", out_dir / BENCH_JSON)
    if stopped is not None:
        return stopped
    broken = [v for v in report.variants if v.error]
    if broken:
        first = broken[0]
        error_class = {EXIT_USAGE: UsageError, EXIT_DAEMON: DaemonUnreachable}.get(
            first.error_exit_code or 0, LaunchError)
        return error_class(
            f"bench: {len(broken)} target(s) could not be benchmarked; "
            f"{first.variant}: {first.error}",
            hint=f"partial report in {out_dir}",
        )
    if report.failed_requests:
        return SmokeError(
            f"bench: {report.failed_requests} request(s) failed",
            hint=f"see `errors` per level in {out_dir / BENCH_JSON}",
        )
    early = [v for v in report.variants if v.stopped]
    if early:
        return SmokeError(f"bench: {early[0].variant}: {early[0].stopped}",
                          hint=f"the levels measured are in {out_dir / BENCH_JSON}")
    return None
