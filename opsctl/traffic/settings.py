"""The settings of `smoke` and `bench`, one model each: every knob's name, type, default, bounds
and help are written here only.

The CLI's options read their help, bounds and defaults from these fields (cli/knobs.py), the
gate's and decide's smoke, decide's sweep, `tune`'s bench and the runtime options (SmokeOptions;
BenchOptions holds its BenchSettings) read the models, and each report records the settings it
ran with, every knob (SmokeReport.settings, BenchReport.config.settings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from opsctl.traffic.payload import Api

# bench's concurrency levels when --concurrency is not given.
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
# The default deadline of one target's sweep never exceeds this (pass --deadline for more).
DEADLINE_CAP_S = 3600.0
DatasetName = Literal["words", "random", "sharegpt", "generated-shared-prefix", "mooncake-trace"]
DATASET_NAMES: tuple[DatasetName, ...] = ("words", "random", "sharegpt", "generated-shared-prefix",
                                          "mooncake-trace")
_DAY_S = 86400.0
# The longest --deadline accepted; without one, a trace's own arrivals may take at most this.
MAX_DEADLINE_S = 7 * _DAY_S
_API = "OpenAI endpoint to exercise: 'completions' or 'chat'."
_MODEL = ("Served model name to use when /v1/models lists several and none is the profile's "
          "(never guessed otherwise).")


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SmokeSettings(_Settings):
    """What smoke sends and how long it waits (`opsctl smoke`, `up --gate`, `decide`)."""

    api: Api = Field("completions", description=_API)
    # None: the profile's alias, or the only one
    model: str | None = Field(None, description=_MODEL)
    request_timeout_s: float = Field(120.0, ge=0.01, le=_DAY_S, description="Seconds per request.")
    overall_timeout_s: float = Field(600.0, ge=0.01, le=_DAY_S, description=(
        "Seconds for the checks (readiness to compare); each eval has --eval-timeout of its own."))
    # Each eval asked for (GSM8K, the long-context probes) runs after the checks with
    # a budget of its own: on GLM-5 one eval takes minutes, and two sharing the checks' budget
    # left the second one failed for time.
    eval_timeout_s: float = Field(3600.0, ge=0.01, le=_DAY_S, description=(
        "Seconds for each eval asked for (GSM8K, the long-context probes), after the checks."))


class BenchSettings(_Settings):
    """What a sweep sends at each level (`opsctl bench`, decide's sweep, `tune`'s points): the
    load, the timeouts and the workload."""

    concurrency: tuple[int, ...] = Field(DEFAULT_CONCURRENCY, description=(
        "Comma-separated levels (default " + ",".join(map(str, DEFAULT_CONCURRENCY)) + ")."))
    requests_per_level: int | None = Field(None, ge=1, le=1_000_000, description=(
        "Measured requests per level (default max(16, 4 x concurrency))."))
    input_words: int = Field(256, ge=1, le=1_000_000, description=(
        "Prompt length in words (about one token each)."))
    output_tokens: int = Field(256, ge=2, le=1_000_000, description="Output tokens per request.")
    api: Api = Field("completions", description=_API)
    model: str | None = Field(None, description=_MODEL)
    request_timeout_s: float = Field(600.0, ge=0.01, le=_DAY_S, description="Seconds per request.")
    # None: the most its levels could take at the request timeout (BenchOptions.deadline)
    deadline_s: float | None = Field(None, ge=1, le=MAX_DEADLINE_S, description=(
        "Seconds each target's sweep may take (default: the most its levels could take at the "
        f"request timeout, at most {DEADLINE_CAP_S:.0f})."))
    ignore_eos: bool = Field(True, description=(
        "Send sglang/vLLM's ignore_eos so every answer is --output-tokens long (--no-ignore-eos "
        "for servers that refuse it)."))
    request_rate: float | None = Field(None, ge=1e-6, le=1e9, description=(
        "Poisson arrivals per second (seeded), with each --concurrency level as the cap; "
        "default: a closed loop."))
    duration_s: float | None = Field(None, ge=0.01, le=7 * _DAY_S, description=(
        "Seconds of measured load per level (instead of --requests, which then caps it)."))
    client_workers: int | None = Field(None, ge=1, le=1024, description=(
        "Client processes sending each level, each with its own event loop (never more than "
        "the level's concurrency). Default: one per 64 concurrent streams, at most the usable "
        "cores less one."))
    saturation_gain: float | None = Field(
        None, ge=0, le=1, description="Stop the sweep after a level whose output throughput "
        "rose by less than this share over the previous level's while its E2E p50 rose by "
        "more (saturated: more concurrency only queues); None: never.")
    max_error_rate: float | None = Field(
        None, ge=0, le=1, description="Stop the sweep after a level whose failed share of its "
        "requests (measured and warm-up) is above this; None: never.")
    # The workload (opsctl.traffic.bench.workloads.WorkloadSpec.of reads these).
    # --dataset-name as asked (BenchConfig.dataset_name: what the run sent, after a fallback)
    dataset: DatasetName | None = Field(None, description=(
        "words | random (token-exact with --tokenizer or the profile's model mount) | sharegpt "
        "(--dataset-path) | generated-shared-prefix | mooncake-trace (--dataset-path: replayed "
        "at its timestamps, prompts sharing its hash_ids' 512-token blocks). Default: random, "
        "token-exact whenever a tokenizer is found, else words (the report's note says why)."))
    dataset_path: Path | None = Field(None, description=(
        "ShareGPT-format JSON file, or a Mooncake trace JSONL for --dataset-name mooncake-trace "
        "(local)."))
    tokenizer: Path | None = Field(None, description=(
        "Host path of the served model's tokenizer.json or model directory (where "
        "/model_info's tokenizer path lives on this host)."))
    seed: int = Field(0, description="Seed of prompts and arrivals.")
    gsp_groups: int = Field(8, ge=1, le=100_000, description=(
        "generated-shared-prefix: prefix groups."))
    gsp_prompts_per_group: int = Field(8, ge=1, le=100_000, description=(
        "generated-shared-prefix: prompts per group."))
    gsp_prefix_len: int = Field(512, ge=1, le=1_000_000, description=(
        "generated-shared-prefix: tokens of each shared prefix (the question is --input-words "
        "long)."))
    multi_turn: int = Field(1, ge=1, le=1000, description=(
        "Chat sessions of N turns (--api chat): each turn sends the session's history, its "
        "earlier prompts and the server's answers, before its own prompt (seeded like the "
        "prompts). 1: single requests."))
    trace_scale: float = Field(1.0, ge=1e-6, le=1e6, description=(
        "mooncake-trace: send each request at its timestamp x this (0.5: twice as fast)."))
    range_ratio: float = Field(1.0, ge=0.0, le=1.0, description=(
        "random and words: each prompt's and answer's length drawn (seeded) from [length x "
        "ratio, length], as sglang.bench_serving's --random-range-ratio; 1: every length "
        "exact."))
    length_pairs: tuple[tuple[int, int], ...] = Field((), max_length=64, description=(
        "random and words: ISL:OSL pairs, e.g. '1024:256,8192:1024': request i takes pair i "
        "mod N (then --random-range-ratio within it), so one sweep judges a mix of shapes; "
        "empty: every request --input-words / --output-tokens."))
    extra_request_body: dict[str, Any] | None = Field(None, description=(
        "A JSON object merged into every request's body, e.g. '{\"chat_template_kwargs\": "
        "{\"enable_thinking\": false}}' (sglang.bench_serving's --extra-request-body; the "
        "keys opsctl sets itself, temperature and ignore_eos among them, and "
        "max_completion_tokens are refused)."))


# The knobs of what a sweep sends (decide's sweep takes them too: one definition, bench's).
WORKLOAD_KNOBS = ("input_words", "output_tokens", "api", "dataset", "dataset_path", "tokenizer",
                  "seed", "gsp_groups", "gsp_prompts_per_group", "gsp_prefix_len", "multi_turn",
                  "trace_scale", "range_ratio", "length_pairs", "extra_request_body")


def bench_knob(name: str) -> Any:
    """BenchSettings' field `name` (default, bounds, help), for a model whose knob is bench's
    own (decide's requests per level, tune's prompt length and request timeout)."""
    return BenchSettings.model_fields[name]


SMOKE_DEFAULTS = SmokeSettings()
BENCH_DEFAULTS = BenchSettings()
