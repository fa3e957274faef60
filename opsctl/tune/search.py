"""What `opsctl tune` searches: the knobs, the grid, the halving schedule and the ranking.

Knobs are typed `ServerSettings` fields; each value is parsed with the field's own type and the
settings are validated whole, so `--param mem_fraction_static=1.2` is refused before anything
starts, as the profile would refuse it.

Search rule. Without a budget, every grid point is measured once with the full request count
(`grid`). With `--budget`, the first point is measured in full and its wall time (up, bench,
down) prices a point: when the whole grid fits the budget it stays `grid`; otherwise the rest
is `halving` (successive halving, eta = 2): rung 0 measures every point with
r0 = max(MIN_REQUESTS, ceil(N / 2^K)) requests (K = ceil(log2 points); the first point's full
measurement stands for its rung-0 one), each next rung keeps the better half by TPOT p50
(failed points never advance) and doubles the requests, until one point is left. Before each
point the budget is checked against the time spent plus that point's price (fixed start-up
cost + requests x cost per request, both from the first point); a point that does not fit is
skipped, and the best of the highest rung reached wins.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from opsctl.config.profile_models import ServerSettings
from opsctl.config.profiles import Deployment
from opsctl.core.errors import UsageError

# Fields that are not performance knobs: where the server listens, what it runs, secrets.
NOT_TUNABLE = frozenset({"entrypoint", "host", "port", "extra_args", "api_key_env",
                         "admin_api_key_env"})
MIN_REQUESTS = 4
GRID, HALVING = "grid", "halving"

Point = dict[str, Any]


# Sanity bounds on the search, refused while parsing: every point starts a server (minutes on
# 8 GPUs) and benches it, so 1000 full points is already days; halving measures most points
# with few requests, yet each still starts a server.
MAX_POINTS = 1000
MAX_POINTS_BUDGETED = 100_000
MAX_KNOB_VALUES = 1000


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple[Any, ...]


def tunable() -> list[str]:
    return sorted(set(ServerSettings.model_fields) - NOT_TUNABLE)


def parse_param(text: str, base: ServerSettings) -> Knob:
    """`NAME=v1,v2`: NAME a ServerSettings field, each value parsed with its type ("null" for
    None where the field allows it)."""
    name, sep, raw = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not raw.strip():
        raise UsageError(f"--param {text!r}: expected NAME=v1,v2", hint="e.g. --param "
                         "cuda_graph_max_bs=16,32")
    if name not in ServerSettings.model_fields or name in NOT_TUNABLE:
        raise UsageError(f"--param {name!r}: not a tunable server setting",
                         hint=f"one of: {', '.join(tunable())}")
    annotation = ServerSettings.model_fields[name].annotation
    adapter: TypeAdapter[Any] = TypeAdapter(annotation if annotation is not None else Any)
    items = raw.split(",")
    if len(items) > MAX_KNOB_VALUES:
        raise UsageError(f"--param {name}: {len(items)} values, more than {MAX_KNOB_VALUES}",
                         hint="fewer values; tune measures every combination")
    values = []
    for item in (part.strip() for part in items):
        try:
            value = adapter.validate_python(None if item in ("null", "none", "None") else item)
            ServerSettings.model_validate({**base.model_dump(), name: value})
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"]
            raise UsageError(f"--param {name}={item}: {reason}",
                             hint=f"{name} takes {annotation}") from None
        if value not in values:
            values.append(value)
    return Knob(name=name, values=tuple(values))


def grid(knobs: Sequence[Knob], *, budgeted: bool = False) -> list[Point]:
    """Every combination, the first knob varying slowest (the order the user wrote); refused
    before it is built past `MAX_POINTS` (`MAX_POINTS_BUDGETED` with a budget)."""
    names = [k.name for k in knobs]
    if len(set(names)) != len(names):
        raise UsageError(f"--param names repeat: {names}", hint="give each knob once, with all "
                         "its values: --param NAME=v1,v2")
    size = math.prod(len(k.values) for k in knobs)
    if not budgeted and size > MAX_POINTS:
        raise UsageError(
            f"the grid has {size} points; without --budget tune measures each in "
            f"full, and more than {MAX_POINTS} is refused (each point starts a server)",
            hint="give --budget MINUTES (successive halving) or fewer values",
        )
    if size > MAX_POINTS_BUDGETED:
        raise UsageError(f"the grid has {size} points, more than the {MAX_POINTS_BUDGETED} tune "
                         "searches even with --budget", hint="fewer knobs or values")
    return [dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(k.values for k in knobs))]


def key(point: Point) -> str:
    """A stable name for a point: `a=1,b=x`."""
    return ",".join(f"{name}={value}" for name, value in point.items())


def apply(deployment: Deployment, point: Point) -> Deployment:
    """The deployment with the point's settings over its server settings."""
    server = ServerSettings.model_validate({**deployment.server.model_dump(), **point})
    return deployment.model_copy(update={"server": server})


def rungs(points: int) -> int:
    """K: the rung index of the last halving rung (one point left)."""
    return max(0, math.ceil(math.log2(points))) if points > 1 else 0


def rung_requests(rung: int, points: int, full: int) -> int:
    return max(MIN_REQUESTS, math.ceil(full / 2 ** (rungs(points) - rung)))


def survivors(count: int) -> int:
    """How many of `count` measured points go on to the next rung."""
    return max(1, math.ceil(count / 2))


@dataclass(frozen=True)
class Price:
    """What a point costs, from the first one measured: fixed start-up + per request."""

    fixed_s: float
    per_request_s: float

    def of(self, requests: int) -> float:
        return self.fixed_s + self.per_request_s * requests


def choose_mode(budget_s: float | None, points: int, full: int, price: Price | None) -> str:
    if budget_s is None or price is None or points * price.of(full) <= budget_s:
        return GRID
    return HALVING
