"""A settings field as a typer option: the help and bounds are the field's own (the settings
models of traffic/, decide/ and tune/ write each knob's name, type, default, bounds and help
once); the command's signature gives the flag and reads the default from the same model.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import annotated_types
import typer
from pydantic import BaseModel

from opsctl.cli.app import within
from opsctl.traffic.settings import BenchSettings


def knob(model: type[BaseModel], name: str, *flags: str, **extra: Any) -> Any:
    """The typer option of `model`'s field `name`: its description as the help, its bounds as
    min/max (integers) or a `within` check (numbers: nan and inf refused too)."""
    field = model.model_fields[name]
    low: Any = None
    high: Any = None
    for rule in field.metadata:
        if isinstance(rule, annotated_types.Ge):
            low = rule.ge
        elif isinstance(rule, annotated_types.Le):
            high = rule.le
    if low is not None or high is not None:
        if _is_float(field.annotation):
            extra.setdefault("callback", within(-math.inf if low is None else low,
                                                math.inf if high is None else high))
        else:
            extra.setdefault("min", low)
            extra.setdefault("max", high)
    return typer.Option(*flags, help=extra.pop("help", field.description), **extra)


def _is_float(annotation: Any) -> bool:
    return annotation is float or "float" in str(annotation)


# --- the workload's options, one definition for `bench` and `decide` ----------------------------

def _bench(name: str, flag: str) -> Any:
    return knob(BenchSettings, name, flag)


InputWordsOpt = Annotated[int, _bench("input_words", "--input-words")]
OutputTokensOpt = Annotated[int, _bench("output_tokens", "--output-tokens")]
ApiOpt = Annotated[str, _bench("api", "--api")]
DatasetNameOpt = Annotated[str | None, _bench("dataset", "--dataset-name")]
DatasetPathOpt = Annotated[str | None, _bench("dataset_path", "--dataset-path")]
TokenizerOpt = Annotated[str | None, _bench("tokenizer", "--tokenizer")]
SeedOpt = Annotated[int, _bench("seed", "--seed")]
GspGroupsOpt = Annotated[int, _bench("gsp_groups", "--gsp-groups")]
GspPromptsOpt = Annotated[int, _bench("gsp_prompts_per_group", "--gsp-prompts-per-group")]
GspPrefixOpt = Annotated[int, _bench("gsp_prefix_len", "--gsp-prefix-len")]
MultiTurnOpt = Annotated[int, _bench("multi_turn", "--multi-turn")]
TraceScaleOpt = Annotated[float, _bench("trace_scale", "--trace-scale")]
RangeRatioOpt = Annotated[float, _bench("range_ratio", "--random-range-ratio")]
ExtraBodyOpt = Annotated[str | None, _bench("extra_request_body", "--extra-request-body")]
IslOslOpt = Annotated[str | None, typer.Option(
    "--isl-osl", help=BenchSettings.model_fields["length_pairs"].description)]


def workload(given: dict[str, Any]) -> dict[str, Any]:
    """BenchSettings' workload fields (traffic.settings.WORKLOAD_KNOBS) from the values of the
    options above, by parameter name: names and paths parsed, the request body checked (a bad
    one is exit 2 here, before anything starts)."""
    from pathlib import Path

    from opsctl.traffic.bench.sweep import parse_request_body
    from opsctl.traffic.bench.workloads import parse_dataset_name, parse_length_pairs
    from opsctl.traffic.client import parse_api

    path, tokenizer = given["dataset_path"], given["tokenizer"]
    return {
        "input_words": given["input_words"], "output_tokens": given["output_tokens"],
        "api": parse_api(given["api"]),
        "dataset": parse_dataset_name(given["dataset_name"]) if given["dataset_name"] else None,
        "dataset_path": Path(path) if path else None,
        "tokenizer": Path(tokenizer) if tokenizer else None, "seed": given["seed"],
        "gsp_groups": given["gsp_groups"], "gsp_prompts_per_group": given["gsp_prompts_per_group"],
        "gsp_prefix_len": given["gsp_prefix_len"], "multi_turn": given["multi_turn"],
        "trace_scale": given["trace_scale"], "range_ratio": given["random_range_ratio"],
        "length_pairs": parse_length_pairs(given["isl_osl"]),
        "extra_request_body": parse_request_body(given["extra_request_body"]),
    }
