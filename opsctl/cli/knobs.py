"""A settings field as a typer option: the help and bounds are the field's own (the settings
models of traffic/, decide/ and tune/ write each knob's name, type, default, bounds and help
once); the command's signature gives the flag and reads the default from the same model.
"""

from __future__ import annotations

import math
from typing import Any

import annotated_types
import typer
from pydantic import BaseModel

from opsctl.cli.app import within


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
