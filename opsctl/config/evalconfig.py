"""The profile's optional `eval:` section: which accuracy checks `opsctl smoke` can run.

`gsm8k` sets the accuracy gate and its data: by default GSM8K's test split, downloaded once
from its public source into the state directory and checked against the sha256 pinned in
config/datasets.py; or a local, sha256-pinned GSM8K-shaped JSONL file the profile names.
`long_context` sets the sizes of the pass-key probes and the shared-prefix pair that
`smoke --long-context` sends; its defaults are the probes' own (traffic/evals/probes.py says
why those sizes). Relative paths are resolved against the project root, like
`dockerfile`.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from opsctl.core.paths import project_root

# The evals' defaults, written once here; the traffic room's evals take them from here.
DEFAULT_SHOTS = 5  # GSM8K few-shot examples
DEFAULT_QUESTIONS = 200  # GSM8K questions scored
DEFAULT_SIZES = (4096, 16384, 65536)  # long-context pass-key prompt sizes (tokens)
DEFAULT_PREFIX_PAIR_TOKENS = 16384  # the prefix-cached pair's shared prefix

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
MIN_PROBE_TOKENS = 64  # the needle prompt's own floor (probes.needle_prompt)
MAX_PROBE_TOKENS = 1 << 20  # past any served context; 10^11 was a MemoryError building the prompt


def _pin(value: str | None) -> str | None:
    if value is not None and not _SHA256_RE.fullmatch(value):
        raise ValueError("must be 64 lowercase hex digits (the output of `sha256sum FILE`)")
    return value


def resolve_path(value: str) -> Path:
    """A profile path: absolute as given, relative to the project root otherwise."""
    path = Path(value)
    return path if path.is_absolute() else project_root() / path


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Gsm8kConfig(_Strict):
    dataset: str | None = Field(None, description="GSM8K-shaped JSONL on this host; null: "
                                "GSM8K's test split, which opsctl downloads once into the state "
                                "directory and checks against its pinned sha256 "
                                "(config/datasets.py).")
    sha256: str | None = Field(None, description="sha256 of `dataset` (set both or neither); "
                               "a different file is refused (exit 2).")
    shots_from: str | None = Field(None, description="JSONL of few-shot examples (a train "
                                   "split); null: the first `shots` lines of `dataset`, as "
                                   "sglang's few_shot_gsm8k does.")
    shots_sha256: str | None = None
    questions: int = Field(DEFAULT_QUESTIONS, ge=1, description="First N questions asked.")
    shots: int = Field(DEFAULT_SHOTS, ge=0, description="Few-shot examples per prompt.")
    threshold: float = Field(gt=0.0, le=1.0, description="Least accuracy that passes (a share).")
    score_thinking: bool = Field(False, description="Score the thinking a reasoning parser "
                                 "split off (`reasoning_content`) followed by the answer, as "
                                 "if no parser ran; false: the answer (`content`) alone. The "
                                 "report's `scored` says which.")

    _pins = field_validator("sha256", "shots_sha256")(_pin)

    @model_validator(mode="after")
    def _shots_pinned(self) -> Gsm8kConfig:
        if (self.dataset is None) != (self.sha256 is None):
            raise ValueError("dataset and sha256 go together (both set, or both null for "
                             "GSM8K's pinned test split)")
        if (self.shots_from is None) != (self.shots_sha256 is None):
            raise ValueError("shots_from and shots_sha256 go together (both set or both null)")
        return self


class LongContextConfig(_Strict):
    sizes: list[int] = Field(default_factory=lambda: list(DEFAULT_SIZES), min_length=1,
                             description="Approximate prompt tokens of each pass-key probe.")
    prefix_pair_tokens: int | None = Field(DEFAULT_PREFIX_PAIR_TOKENS, ge=MIN_PROBE_TOKENS,
                                           le=MAX_PROBE_TOKENS,
                                           description="Size of the prefix-cache pair; null: "
                                           "no pair.")

    @field_validator("sizes")
    @classmethod
    def _sizes_big_enough(cls, value: list[int]) -> list[int]:
        if any(size < MIN_PROBE_TOKENS for size in value):
            raise ValueError(f"every size must be at least {MIN_PROBE_TOKENS} tokens")
        if any(size > MAX_PROBE_TOKENS for size in value):
            raise ValueError(f"every size must be less than or equal to {MAX_PROBE_TOKENS} tokens")
        return value


class EvalConfig(_Strict):
    gsm8k: Gsm8kConfig | None = None
    long_context: LongContextConfig = LongContextConfig()
    reference: str | None = Field(None, description="The variant whose GSM8K accuracy every "
                                  "other's is held against in `decide` (e.g. a BF16-KV one: it "
                                  "reads no FP8 rows); null: no comparison.")
    max_accuracy_drop: float = Field(0.05, gt=0.0, le=1.0, description="How far below the "
                                     "reference's GSM8K accuracy (a share) a variant may score "
                                     "before `decide` disqualifies it.")

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: object) -> object:
        """A key opsctl once read says what replaced it, not pydantic's 'extra inputs'."""
        if isinstance(data, dict) and "lm_eval" in data:
            raise PydanticCustomError(
                "removed", "lm_eval was removed (it scored what eval.gsm8k scores): delete it "
                "and use eval.gsm8k with `smoke --eval gsm8k`")
        return data
