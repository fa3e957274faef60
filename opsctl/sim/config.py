"""The simulator's two inputs: sglang launch flags (fixed) and behaviour knobs (changeable).

Flags are read leniently on purpose: the simulator must accept whatever opsctl renders for the
real server, so it interprets the few flags that change what it does and keeps the rest only to
echo them in /server_info. It does not reimplement sglang's parser.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FAULTS = (
    "none",
    "die_while_loading",
    "hang",
    "stream_cut",
    "slow_first_token",
    "error_rate",
    "corrupt",
    "misresolve",
)
ENV_PREFIX = "OPSCTL_SIM_"

# sglang 0.5.23 aliases (arg_groups/fields/model.py, parallel.py); "--tp" works there through
# argparse prefix matching.
_ALIASES = {
    "model": "model_path",
    "tp": "tp_size",
    "tensor_parallel_size": "tp_size",
    "ep": "ep_size",
    "expert_parallel_size": "ep_size",
}
_FLOAT_LIST_FLAGS = (
    "bucket_time_to_first_token",
    "bucket_inter_token_latency",
    "bucket_e2e_request_latency",
)
# The simulator's own choice, not GLM-5's: used when --context-length is not given.
SIM_DEFAULT_CONTEXT_LENGTH = 131072
# Knob-to-latency mapping, so `opsctl tune` has something real to find on the simulator (the
# simulator's own choices, not measurements): a decode batch larger than the decode CUDA-graph
# cap (--cuda-graph-max-bs-decode, or --cuda-graph-max-bs) runs without CUDA graphs,
# EAGER_ITL_FACTOR times slower per token; a --mem-fraction-static above SIM_MAX_MEM_FRACTION
# leaves no room for activations, so start-up fails with a CUDA OOM (exit 1).
EAGER_ITL_FACTOR = 1.5
SIM_MAX_MEM_FRACTION = 0.93
TRACE_CAST_CHOICES = ("auto", "on", "off")


class ArgvError(ValueError):
    """The sglang flags cannot be used (the process exits 2, like argparse)."""


def _scalar(token: str) -> Any:
    """Echo values in /server_info with JSON types where the text is plainly a number."""
    lowered = token.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(token)
    except ValueError:
        pass
    try:
        value = float(token)
    except ValueError:
        return token
    return value if math.isfinite(value) else token


def parse_flag_pairs(argv: Sequence[str]) -> dict[str, Any]:
    """``--flag v``, ``--flag=v``, ``--flag v1 v2`` and bare ``--flag`` into snake_case keys.

    A token that does not start with ``--`` belongs to the flag before it, so negative numbers
    (``--chunked-prefill-size -1``) stay values.
    """
    parsed: dict[str, Any] = {}
    current: str | None = None
    values: list[str] = []

    def close() -> None:
        if current is None:
            return
        if not values:
            parsed[current] = True
        elif len(values) == 1:
            parsed[current] = values[0]
        else:
            parsed[current] = list(values)

    for token in argv:
        if token.startswith("--") and len(token) > 2:
            close()
            name, eq, inline = token[2:].partition("=")
            key = name.replace("-", "_")
            current = _ALIASES.get(key, key)
            values = [inline] if eq else []
        elif current is None:
            raise ArgvError(f"unexpected argument {token!r} (sglang takes --flag [value] pairs)")
        else:
            values.append(token)
    close()
    return parsed


def _as_str(raw: dict[str, Any], key: str, default: str | None) -> str | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ArgvError(f"--{key.replace('_', '-')} needs one value")
    return value


def _as_int(raw: dict[str, Any], key: str, default: int | None) -> int | None:
    value = raw.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ArgvError(f"--{key.replace('_', '-')} needs an integer, got {value!r}") from None


def _as_float(raw: dict[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ArgvError(f"--{key.replace('_', '-')} needs a number, got {value!r}") from None


def _as_floats(raw: dict[str, Any], key: str) -> list[float] | None:
    value = raw.get(key)
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    try:
        return [float(item) for item in items]
    except (TypeError, ValueError):
        raise ArgvError(f"--{key.replace('_', '-')} needs numbers, got {value!r}") from None


@dataclass(frozen=True)
class SimArgs:
    """The sglang launch flags the simulator acts on, plus everything it was given."""

    model_path: str
    served_model_name: str
    tokenizer_path: str
    host: str
    port: int
    api_key: str | None
    enable_metrics: bool
    extra_metric_labels: dict[str, str]
    max_running_requests: int | None
    context_length: int
    tp_size: int
    weight_version: str
    bucket_time_to_first_token: list[float] | None
    bucket_inter_token_latency: list[float] | None
    bucket_e2e_request_latency: list[float] | None
    raw: dict[str, Any]
    argv: tuple[str, ...]
    cuda_graph_max_bs: int | None = None
    mem_fraction_static: float | None = None

    def oom_at_start(self) -> bool:
        """Whether this memory fraction fails start-up (see SIM_MAX_MEM_FRACTION)."""
        return (
            self.mem_fraction_static is not None and self.mem_fraction_static > SIM_MAX_MEM_FRACTION
        )

    @classmethod
    def parse(cls, argv: Sequence[str]) -> SimArgs:
        raw = parse_flag_pairs(argv)
        model_path = _as_str(raw, "model_path", None)
        if not model_path:
            raise ArgvError("--model-path is required (as for sglang)")
        served = _as_str(raw, "served_model_name", None) or model_path
        labels_text = raw.get("extra_metric_labels")
        labels: dict[str, str] = {}
        if labels_text is not None:
            try:
                decoded = json.loads(labels_text) if isinstance(labels_text, str) else None
            except json.JSONDecodeError as exc:
                raise ArgvError(f"--extra-metric-labels is not JSON: {exc}") from None
            if not isinstance(decoded, dict):
                raise ArgvError("--extra-metric-labels must be a JSON object")
            labels = {str(key): str(value) for key, value in decoded.items()}
        return cls(
            model_path=model_path,
            served_model_name=served,
            tokenizer_path=_as_str(raw, "tokenizer_path", None) or model_path,
            host=_as_str(raw, "host", "127.0.0.1") or "127.0.0.1",
            port=_as_int(raw, "port", 30000) or 30000,
            api_key=_as_str(raw, "api_key", None),
            enable_metrics=raw.get("enable_metrics") is True,
            extra_metric_labels=labels,
            max_running_requests=_as_int(raw, "max_running_requests", None),
            context_length=_as_int(raw, "context_length", SIM_DEFAULT_CONTEXT_LENGTH)
            or SIM_DEFAULT_CONTEXT_LENGTH,
            tp_size=_as_int(raw, "tp_size", 1) or 1,
            weight_version=_as_str(raw, "weight_version", "default") or "default",
            bucket_time_to_first_token=_as_floats(raw, "bucket_time_to_first_token"),
            bucket_inter_token_latency=_as_floats(raw, "bucket_inter_token_latency"),
            bucket_e2e_request_latency=_as_floats(raw, "bucket_e2e_request_latency"),
            raw=raw,
            argv=tuple(argv),
            # 0.5.23 caps decode graphs with --cuda-graph-max-bs-decode; 0.5.15 also takes
            # --cuda-graph-max-bs (patches/sglang/0.5.15/cli-args.json).
            cuda_graph_max_bs=_as_int(raw, "cuda_graph_max_bs_decode", None)
            or _as_int(raw, "cuda_graph_max_bs", None),
            mem_fraction_static=_as_float(raw, "mem_fraction_static"),
        )

    def typed_flags(self) -> dict[str, Any]:
        """The given flags with JSON types where the text is plainly a number or a boolean."""
        return {
            key: [_scalar(v) for v in value] if isinstance(value, list) else (
                _scalar(value) if isinstance(value, str) else value)
            for key, value in self.raw.items()
        }

    def echoed_fields(self) -> dict[str, Any]:
        """The flags as /server_info shows them: given values with JSON types, resolved names."""
        echoed = {key: value for key, value in self.typed_flags().items()
                  if key not in _FLOAT_LIST_FLAGS and key != "extra_metric_labels"}
        echoed.update(
            model_path=self.model_path,
            served_model_name=self.served_model_name,
            tokenizer_path=self.tokenizer_path,
            host=self.host,
            port=self.port,
            api_key=self.api_key,
            enable_metrics=self.enable_metrics,
            extra_metric_labels=self.extra_metric_labels or None,
            max_running_requests=self.max_running_requests,
            context_length=self.context_length if "context_length" in self.raw else None,
            tp_size=self.tp_size,
            weight_version=self.weight_version,
            bucket_time_to_first_token=self.bucket_time_to_first_token,
            bucket_inter_token_latency=self.bucket_inter_token_latency,
            bucket_e2e_request_latency=self.bucket_e2e_request_latency,
        )
        return echoed


def _parse_float(name: str, value: Any, *, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not (low <= number <= high) or math.isnan(number):
        raise ValueError(f"{name} must be in [{low}, {high}], got {number}")
    return number


def _parse_models(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        items = value
    else:
        raise ValueError(f"extra_models must be a comma-separated string or a list, got {value!r}")
    return tuple(item.strip() for item in items if item.strip())


@dataclass(frozen=True)
class Behaviour:
    """Timing and fault knobs; immutable, replaced as a whole by the admin endpoint."""

    load_seconds: float = 0.0
    warmup_seconds: float = 0.0
    ttft_ms: float = 50.0
    itl_ms: float = 20.0
    itl_slope_ms: float = 0.0
    fault: str = "none"
    stream_cut_after: int = 3
    error_rate: float = 0.0
    extra_models: tuple[str, ...] = field(default_factory=tuple)
    kv_usage: float | None = None
    health_delay_ms: float = 0.0
    trace_cast: str = "auto"
    # Speculative decoding (MTP): mean tokens per decode step; 0 = none. A step's tokens arrive
    # together and the step takes itl_ms, so TPOT per output token is itl_ms / this.
    spec_accept_length: float = 0.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Behaviour:
        patch = {
            f.name: environ[ENV_PREFIX + f.name.upper()]
            for f in dataclasses.fields(cls)
            if environ.get(ENV_PREFIX + f.name.upper(), "") != ""
        }
        return cls().updated(patch)

    def updated(self, patch: Mapping[str, Any]) -> Behaviour:
        """A copy with ``patch`` applied; ValueError names the first bad key or value."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(patch) - known)
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; known: {sorted(known)}")
        changes: dict[str, Any] = {}
        for key, value in patch.items():
            if key == "fault":
                if value not in FAULTS:
                    raise ValueError(f"fault must be one of {list(FAULTS)}, got {value!r}")
                changes[key] = value
            elif key == "stream_cut_after":
                changes[key] = int(_parse_float(key, value, low=0))
            elif key == "error_rate":
                changes[key] = _parse_float(key, value, low=0.0, high=1.0)
            elif key == "kv_usage":
                changes[key] = None if value is None else _parse_float(key, value, low=0, high=1)
            elif key == "extra_models":
                changes[key] = _parse_models(value)
            elif key == "trace_cast":
                if value not in TRACE_CAST_CHOICES:
                    raise ValueError(f"trace_cast must be one of {list(TRACE_CAST_CHOICES)}, "
                                     f"got {value!r}")
                changes[key] = value
            else:
                changes[key] = _parse_float(key, value, low=0.0)
        return dataclasses.replace(self, **changes)

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["extra_models"] = list(self.extra_models)
        return data

    def itl_seconds(self, running: int, graph_max_bs: int | None = None) -> float:
        eager = EAGER_ITL_FACTOR if graph_max_bs is not None and running > graph_max_bs else 1.0
        return eager * (self.itl_ms + self.itl_slope_ms * max(running - 1, 0)) / 1000.0

    def step_sizes(self) -> Iterator[int]:
        """Tokens per decode step after the first token: 1 without speculation, else whole
        steps whose running mean is spec_accept_length (deterministic, at least 1 each)."""
        length = max(self.spec_accept_length, 1.0)
        step = 0
        while True:
            yield max(round((step + 1) * length) - round(step * length), 1)
            step += 1

    def ttft_seconds(self) -> float:
        factor = 20.0 if self.fault == "slow_first_token" else 1.0
        return self.ttft_ms * factor / 1000.0
