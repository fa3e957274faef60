"""`opsctl tune`'s state file: what was asked and every point measured so far.

Written atomically after every point, so an interrupted run (Ctrl-C, a lost terminal, a crash)
loses at most the point in flight; `--resume` reads it back, refuses a different question (other
profile, variant, knobs, concurrency or request count) and measures only what is missing.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from opsctl.core.errors import UsageError
from opsctl.core.files import atomic_write_text, read_bounded
from opsctl.core.reports import REPORTS_DIR
from opsctl.tune.settings import TuneSettings

STATE_FILE = "tune-state.json"
TUNE_DIR_PREFIX = "tune-"
VERSION: Literal[1] = 1
MAX_STATE_BYTES = 64 << 20  # a state file holds one record per measured point


class Measurement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    point: dict[str, Any]
    rung: int
    requests: int
    status: Literal["ok", "failed"]
    tpot_p50_ms: float | None = None
    ttft_p50_ms: float | None = None
    output_tokens_per_s: float | None = None
    failed_requests: int = 0
    reason: str | None = None  # why it failed: "oom: ...", "nccl: ...", "flag: ...", ...
    log: list[str] = []  # the log lines that say so
    up_s: float = 0.0
    bench_s: float = 0.0
    total_s: float = 0.0
    at: str = ""


class Question(BaseModel):
    """What the run asks; a resumed run must ask the same."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str
    variant: str
    knobs: dict[str, list[Any]]
    concurrency: int
    requests: int
    input_words: int
    output_tokens: int


class TuneState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = VERSION  # a state file of another version is refused
    question: Question
    budget_s: float | None = None
    mode: str | None = None  # grid | halving, decided after the first point
    price_fixed_s: float | None = None
    price_per_request_s: float | None = None
    spent_s: float = 0.0
    measurements: list[Measurement] = []
    skipped: list[str] = []  # "key@rung": not measured, the budget was spent
    finished: bool = False
    interrupted: bool = False
    # What the (last) run used, defaults filled in (TuneSettings); absent in older state files.
    settings: TuneSettings | None = None

    def measured(self, key: str, rung: int) -> Measurement | None:
        return next((m for m in self.measurements if m.key == key and m.rung == rung), None)

    def record(self, measurement: Measurement) -> None:
        self.measurements.append(measurement)
        self.spent_s += measurement.total_s

    def save(self, out_dir: Path) -> Path:
        return atomic_write_text(out_dir / STATE_FILE, self.model_dump_json(indent=2) + "\n")


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def load_state(out_dir: Path) -> TuneState:
    path = out_dir / STATE_FILE
    try:
        return TuneState.model_validate_json(read_bounded(path, "--resume", MAX_STATE_BYTES))
    except FileNotFoundError:
        raise UsageError(f"--resume: no {STATE_FILE} in {out_dir}",
                         hint="pass the --out directory of the run to resume") from None
    except (OSError, ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        raise UsageError(f"--resume: {path} is not a tune state file: {first}",
                         hint="start a new run without --resume") from None


def latest_run(reports: Path = REPORTS_DIR) -> Path:
    """The newest out/tune-*/ holding a state file (for --resume without --out)."""
    runs = sorted(p.parent for p in reports.glob(f"{TUNE_DIR_PREFIX}*/{STATE_FILE}"))
    if not runs:
        raise UsageError(f"--resume: no {TUNE_DIR_PREFIX}*/{STATE_FILE} under {reports}/",
                         hint="pass --out DIR of the run to resume")
    return runs[-1]


def resumed(out_dir: Path, question: Question, budget_s: float | None) -> TuneState:
    state = load_state(out_dir)
    if state.question != question:
        raise UsageError(f"--resume: {out_dir} holds a run of another question "
                         f"({state.question.profile}/{state.question.variant}, knobs "
                         f"{state.question.knobs})",
                         hint="resume with the same --profile/--variant/--param/--concurrency/"
                         "--requests, or start a new run")
    state.budget_s = budget_s if budget_s is not None else state.budget_s
    state.interrupted = False
    return state
