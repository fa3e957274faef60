"""Checkpoint identity: which weights a report was made with, by the files that name them.

Hashing hundreds of GB of safetensors is not an option before every run; the config and the
safetensors index (which lists every tensor and the shard it lives in) identify a checkpoint's
layout and revision cheaply. Two reports whose ids differ were not made with the same weights,
so their outputs and latencies are not comparable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from opsctl.core.errors import UsageError
from opsctl.core.files import sha256_file

CONFIG_FILE = "config.json"
INDEX_GLOB = "*.safetensors.index.json"


@dataclass(frozen=True)
class CheckpointId:
    files: dict[str, str]  # file name -> sha256
    combined: str  # sha256 over the sorted "name sha256" lines

    def to_json(self) -> dict[str, Any]:
        return {"files": dict(self.files), "combined": self.combined}


def _combined(files: Mapping[str, str]) -> str:
    lines = "".join(f"{name} {digest}\n" for name, digest in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def checkpoint_id(model_dir: Path) -> CheckpointId:
    """sha256 of config.json and every *.safetensors.index.json, plus their combined id."""
    config = model_dir / CONFIG_FILE
    if not config.is_file():
        raise UsageError(f"{model_dir} has no {CONFIG_FILE}: not a Hugging Face checkpoint",
                         hint="pass the directory that holds config.json and the safetensors")
    paths = [config, *sorted(model_dir.glob(INDEX_GLOB))]
    files = {path.name: sha256_file(path) for path in paths}
    return CheckpointId(files=files, combined=_combined(files))


@dataclass(frozen=True)
class CheckpointComparison:
    status: Literal["same", "different", "unknown"]
    detail: str
    differing: list[str] = field(default_factory=list)


def _as_id(value: CheckpointId | Mapping[str, Any] | None) -> CheckpointId | None:
    """A CheckpointId, or one read back from a report's JSON; None when absent or malformed."""
    if value is None or isinstance(value, CheckpointId):
        return value
    files = value.get("files")
    combined = value.get("combined")
    if not isinstance(files, Mapping) or not isinstance(combined, str):
        return None
    return CheckpointId(files={str(k): str(v) for k, v in files.items()}, combined=combined)


def compare_checkpoints(first: CheckpointId | Mapping[str, Any] | None,
                        second: CheckpointId | Mapping[str, Any] | None) -> CheckpointComparison:
    """Whether two reports were made with the same checkpoint, and which files differ."""
    one, two = _as_id(first), _as_id(second)
    if one is None or two is None:
        return CheckpointComparison("unknown", "a report records no checkpoint id")
    if one.combined == two.combined:
        return CheckpointComparison("same", f"checkpoint {one.combined[:12]}")
    names = sorted(set(one.files) | set(two.files))
    differing = [name for name in names if one.files.get(name) != two.files.get(name)]
    return CheckpointComparison(
        "different",
        f"checkpoint {one.combined[:12]} != {two.combined[:12]} ({', '.join(differing)})",
        differing,
    )
