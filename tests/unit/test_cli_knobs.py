"""Each knob is written once: the typer options of smoke, bench, decide and tune take their
help, default and bounds from the settings models' fields (cli/knobs.py), so a changed default
or help text changes the CLI, and the reports that record the model, together."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from pydantic import BaseModel

from opsctl.cli import app
from opsctl.decide.settings import DecideSettings
from opsctl.traffic.settings import BenchSettings, SmokeSettings
from opsctl.tune.settings import TuneSettings

# command -> (its settings model, {option name: field}) for options that are settings
KNOBS: dict[str, tuple[type[BaseModel], dict[str, str]]] = {
    "smoke": (SmokeSettings, {"model": "model", "api": "api",
                              "request_timeout": "request_timeout_s",
                              "timeout": "overall_timeout_s", "eval_timeout": "eval_timeout_s"}),
    "bench": (BenchSettings, {
        "requests": "requests_per_level", "input_words": "input_words",
        "output_tokens": "output_tokens", "model": "model", "api": "api",
        "request_timeout": "request_timeout_s", "deadline": "deadline_s",
        "request_rate": "request_rate", "duration": "duration_s", "ignore_eos": "ignore_eos",
        "dataset_name": "dataset", "dataset_path": "dataset_path", "multi_turn": "multi_turn",
        "trace_scale": "trace_scale", "tokenizer": "tokenizer", "seed": "seed",
        "gsp_groups": "gsp_groups", "gsp_prompts_per_group": "gsp_prompts_per_group",
        "gsp_prefix_len": "gsp_prefix_len", "client_workers": "client_workers",
        "concurrency": "concurrency", "extra_request_body": "extra_request_body",
        "random_range_ratio": "range_ratio"}),
    "decide": (DecideSettings, {"requests": "requests_per_level", "skip_eval": "skip_eval",
                                "timeout": "timeout_s", "repeats": "repeats",
                                "margin": "margin_percent", "concurrency": "concurrency",
                                "quick": "quick", "input_words": "input_words",
                                "output_tokens": "output_tokens", "api": "api",
                                "dataset_name": "dataset", "dataset_path": "dataset_path",
                                "tokenizer": "tokenizer", "seed": "seed",
                                "multi_turn": "multi_turn", "trace_scale": "trace_scale",
                                "extra_request_body": "extra_request_body",
                                "random_range_ratio": "range_ratio"}),
    "tune": (TuneSettings, {"budget": "budget_minutes", "concurrency": "concurrency",
                            "requests": "requests", "output_tokens": "output_tokens",
                            "request_timeout": "request_timeout_s"}),
}
# Options whose default is not the field's: parsed from a string, or "the run's own" (margin).
NOT_THE_DEFAULT = {("bench", "concurrency"), ("decide", "concurrency"), ("decide", "margin")}


@pytest.mark.parametrize("command", sorted(KNOBS))
def test_the_options_read_their_help_and_default_from_the_settings(command: str) -> None:
    model, options = KNOBS[command]
    group: Any = typer.main.get_command(app)
    params = {p.name: p for p in group.commands[command].params}
    for option, field_name in options.items():
        field = model.model_fields[field_name]
        param = params[option]
        assert param.help == field.description, (command, option)
        if (command, option) not in NOT_THE_DEFAULT:
            default = field.default
            assert param.default == (str(default) if hasattr(default, "__fspath__")
                                     else default), (command, option)


def test_a_bound_is_the_models_own() -> None:
    """--multi-turn 0 is refused by the CLI (exit 2) as the model refuses it."""
    from typer.testing import CliRunner

    with pytest.raises(ValueError, match="greater than or equal to 1"):
        BenchSettings(multi_turn=0)
    result = CliRunner().invoke(app, ["bench", "--multi-turn", "0", "--base-url",
                                      "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "--multi-turn" in result.output
