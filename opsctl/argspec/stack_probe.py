"""Load model config.json files with a real transformers. Runs ONLY as a script, in a clean
subprocess.

`opsctl sglang-args stack` starts `python -S -I -B <this file> <env dir> <config dir>...`: no site
packages, no opsctl. This file imports the stdlib only, then the real transformers installed in
<env dir> (the version a pinned sglang release requires, with its own dependencies). For each
config directory it runs `AutoConfig.from_pretrained(dir)` exactly as sglang's `get_config` starts
and prints, as JSON on stdout, the transformers version and per directory either the config
class and the geometry fields sglang reads, or the error transformers raised.
"""

from __future__ import annotations

import json
import os
import sys

# Geometry fields of an MLA + DSA config that sglang reads (reported when the config loads).
_FIELDS = ("model_type", "num_hidden_layers", "num_attention_heads", "kv_lora_rank",
           "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "index_topk",
           "num_nextn_predict_layers", "max_position_embeddings",
           # GLM-5.2's IndexShare: which layers reuse an earlier layer's top-k (None: not kept).
           "index_topk_freq", "index_skip_topk_offset", "index_share_for_mtp_iteration")


def _load(config_dir: str) -> dict[str, object]:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(config_dir, trust_remote_code=False)
    except Exception as error:  # noqa: BLE001 - what transformers raised is the finding
        first = (str(error).strip().splitlines() or [""])[0]
        return {"loads": False, "error": f"{type(error).__name__}: {first}"}
    fields = {name: getattr(config, name, None) for name in _FIELDS}
    kinds = getattr(config, "indexer_types", None)
    # How many layers the config makes reuse an earlier layer's top-k (IndexShare).
    fields["indexer_types_shared"] = None if kinds is None else list(kinds).count("shared")
    return {"loads": True, "config_class": type(config).__name__, "fields": fields}


def main() -> None:
    env_dir, *config_dirs = sys.argv[1:]
    sys.path.insert(0, env_dir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers

    results = {path: _load(path) for path in config_dirs}
    print(json.dumps({"transformers": transformers.__version__, "configs": results}))


if __name__ == "__main__":
    main()
