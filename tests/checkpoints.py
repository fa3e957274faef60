"""Checkpoint folders written by the tests, in the shape `up`'s preflight reads: config.json
(GLM-5's, tests/fixtures/glm5/config.json), a tokenizer, a safetensors index and stand-in
shards. The shards are not safetensors files (nothing reads their tensors before the server
does): files of a few bytes each, the sizes the index's `total_size` adds up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opsctl.core.paths import project_root

GLM5_CONFIG = project_root() / "tests" / "fixtures" / "glm5" / "config.json"
SHARD_BYTES = 64
NEXTN_TENSORS = ("eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight")


def glm5_config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GLM5_CONFIG.read_text())
    return data


def write_tokenizer(folder: Path) -> None:
    """tests/tinymodel's word-level tokenizer, with the tokenizer class transformers 4.x and
    5.x both know (5.x saves `TokenizersBackend`, a name 4.57.1 has not)."""
    from tinymodel import build_tiny_tokenizer

    build_tiny_tokenizer(folder)
    path = folder / "tokenizer_config.json"
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(data, indent=2))


def write_checkpoint(folder: Path, *, config: dict[str, Any] | None = None, nextn: bool = True,
                     missing_shard: bool = False, tokenizer: bool = True) -> Path:
    """A GLM-5-shaped checkpoint folder: two stand-in shards, the NextN layer's tensors
    (model.layers.<num_hidden_layers>.*) in the second unless `nextn` is off; `missing_shard`
    leaves the second shard out of the folder (the index still names it)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = config if config is not None else glm5_config()
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    layers = int(config.get("num_hidden_layers", 78))
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {"model.embed_tokens.weight": shards[0],
                  "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": shards[0],
                  f"model.layers.{layers - 1}.mlp.gate.weight": shards[1],
                  "lm_head.weight": shards[1]}
    if nextn:
        weight_map.update({f"model.layers.{layers}.{name}": shards[1] for name in NEXTN_TENSORS})
    index = {"metadata": {"total_size": SHARD_BYTES * len(shards) - 16}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    for shard in shards[:1] if missing_shard else shards:
        (folder / shard).write_bytes(b"\0" * SHARD_BYTES)
    if tokenizer:
        write_tokenizer(folder)
    return folder
