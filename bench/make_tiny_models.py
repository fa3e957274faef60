"""Tiny random models for a real sglang server, written here: no hub, no download.

    python bench/make_tiny_models.py --out DIR [--kind mla|glm5|glm5-mtp|all]

- `tiny-mla`: DeepseekV2ForCausalLM-shaped (MLA with kv_lora_rank 512 and a 64-wide rope part,
  the shapes flashinfer's MLA kernels take; 2 layers, the second one MoE with 8 small experts).
- `tiny-glm5`: GlmMoeDsaForCausalLM-shaped (MLA + the DSA indexer with a small index_topk,
  MoE with a few small experts, 2 layers). Written for the DSA path; not served in this run.
- `tiny-glm5-mtp`: tiny-glm5 plus one NextN (MTP) layer, as GLM-5 ships it: config
  `num_nextn_predict_layers: 1` and `model.layers.<num_hidden_layers>.*` holding a whole decoder
  layer (MLA + indexer + MoE) and the NextN parts sglang's loader reads (`enorm`, `hnorm`,
  `eh_proj`, `shared_head.norm`; `embed_tokens` and `shared_head.head` are in the checkpoint and
  skipped by the loader, which shares the target's). For EAGLE/NEXTN runs
  (bench/mtp_gathercast_gpu.py).

Weights are random BF16 (seeded), saved as safetensors under the checkpoint names sglang's
loaders read; the tokenizer is word-level over bench's prompt words (tokenizers library), so
each prompt word is one token. Norm weights are 1, every other tensor N(0, 0.02).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPECIALS = ["<unk>", "<s>", "</s>"]
VOCAB_SIZE = 512


def _vocab() -> list[str]:
    from opsctl.traffic.bench.prompts import _WORDS

    words = list(dict.fromkeys(["Request", *_WORDS]))
    words += [f"w{i}" for i in range(VOCAB_SIZE - len(SPECIALS) - len(words))]
    return SPECIALS + words


def write_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = _vocab()
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    fast.save_pretrained(out)
    return len(vocab)


MLA = {  # the MLA shapes flashinfer's MLA kernels take (DeepSeek-V2/V3 and GLM-5 alike)
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
}


def mla_config(vocab: int) -> dict:
    return {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "vocab_size": vocab,
        "hidden_size": 512,
        "intermediate_size": 1024,
        "moe_intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "n_shared_experts": 1,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "routed_scaling_factor": 1.0,
        "topk_method": "greedy",
        "n_group": 1,
        "topk_group": 1,
        "scoring_func": "softmax",
        "norm_topk_prob": False,
        "moe_layer_freq": 1,
        "first_k_dense_replace": 1,
        "q_lora_rank": None,
        **MLA,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
        "initializer_range": 0.02,
    }


def glm5_config(vocab: int) -> dict:
    cfg = mla_config(vocab)
    cfg.update(
        {
            "architectures": ["GlmMoeDsaForCausalLM"],
            "model_type": "glm_moe_dsa",
            "q_lora_rank": 256,
            "topk_method": "noaux_tc",
            "scoring_func": "sigmoid",
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
            # the DSA indexer: GLM-5's top-k, so it selects from 2,048 tokens on (long prompts
            # below)
            "index_topk": 2048,  # GLM-5's own; 0.5.15's fused top-k (sgl_kernel) asserts 2048
            "index_head_dim": 128,
            # GLM-5's own; DeepGEMM's sm_90 paged MQA logits take 32 or 64 only
            "index_n_heads": 32,
        }
    )
    return cfg


def glm5_mtp_config(vocab: int) -> dict:
    cfg = glm5_config(vocab)
    cfg["num_nextn_predict_layers"] = 1
    return cfg


CONFIGS = {"mla": mla_config, "glm5": glm5_config, "glm5-mtp": glm5_mtp_config}


def _nextn_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    """The NextN-only tensors of the MTP layer (index num_hidden_layers + k)."""
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    shapes: dict[str, tuple[int, ...]] = {}
    for k in range(cfg.get("num_nextn_predict_layers", 0)):
        p = f"model.layers.{cfg['num_hidden_layers'] + k}."
        shapes.update({
            p + "enorm.weight": (h,),
            p + "hnorm.weight": (h,),
            p + "eh_proj.weight": (h, 2 * h),
            p + "shared_head.norm.weight": (h,),
            p + "shared_head.head.weight": (vocab, h),
            p + "embed_tokens.weight": (vocab, h),
        })
    return shapes


def _tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (cfg["vocab_size"], h),
        "model.norm.weight": (h,),
        "lm_head.weight": (cfg["vocab_size"], h),
        **_nextn_tensors(cfg),
    }
    # The NextN layers are whole decoder layers after the last hidden one (MoE: past
    # first_k_dense_replace), under the same names.
    for i in range(cfg["num_hidden_layers"] + cfg.get("num_nextn_predict_layers", 0)):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        a = p + "self_attn."
        if cfg["q_lora_rank"] is None:
            shapes[a + "q_proj.weight"] = (heads * qk, h)
        else:
            shapes[a + "q_a_proj.weight"] = (cfg["q_lora_rank"], h)
            shapes[a + "q_a_layernorm.weight"] = (cfg["q_lora_rank"],)
            shapes[a + "q_b_proj.weight"] = (heads * qk, cfg["q_lora_rank"])
        shapes[a + "kv_a_proj_with_mqa.weight"] = (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h)
        shapes[a + "kv_a_layernorm.weight"] = (cfg["kv_lora_rank"],)
        shapes[a + "kv_b_proj.weight"] = (
            heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]),
            cfg["kv_lora_rank"],
        )
        shapes[a + "o_proj.weight"] = (h, heads * cfg["v_head_dim"])
        if "index_topk" in cfg:
            ix = a + "indexer."
            shapes[ix + "wq_b.weight"] = (
                cfg["index_n_heads"] * cfg["index_head_dim"],
                cfg["q_lora_rank"],
            )
            shapes[ix + "wk.weight"] = (cfg["index_head_dim"], h)
            shapes[ix + "k_norm.weight"] = (cfg["index_head_dim"],)
            shapes[ix + "k_norm.bias"] = (cfg["index_head_dim"],)
            shapes[ix + "weights_proj.weight"] = (cfg["index_n_heads"], h)
        m = p + "mlp."
        if i < cfg["first_k_dense_replace"]:
            inter = cfg["intermediate_size"]
            shapes.update(
                {
                    m + "gate_proj.weight": (inter, h),
                    m + "up_proj.weight": (inter, h),
                    m + "down_proj.weight": (h, inter),
                }
            )
            continue
        inter = cfg["moe_intermediate_size"]
        shapes[m + "gate.weight"] = (cfg["n_routed_experts"], h)
        if cfg["topk_method"] == "noaux_tc":
            shapes[m + "gate.e_score_correction_bias"] = (cfg["n_routed_experts"],)
        for e in range(cfg["n_routed_experts"]):
            x = f"{m}experts.{e}."
            shapes.update(
                {
                    x + "gate_proj.weight": (inter, h),
                    x + "up_proj.weight": (inter, h),
                    x + "down_proj.weight": (h, inter),
                }
            )
        s = inter * cfg["n_shared_experts"]
        shapes.update(
            {
                m + "shared_experts.gate_proj.weight": (s, h),
                m + "shared_experts.up_proj.weight": (s, h),
                m + "shared_experts.down_proj.weight": (h, s),
            }
        )
    return shapes


def write_model(out: Path, kind: str, seed: int = 0) -> Path:
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(out)
    cfg = CONFIGS[kind](vocab)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in _tensors(cfg).items():
        if name.endswith(("norm.weight", "layernorm.weight")):
            t = torch.ones(shape)
        elif name.endswith(("bias",)):
            t = torch.zeros(shape)
        else:
            t = torch.randn(shape, generator=gen) * 0.02
        tensors[name] = t.to(torch.bfloat16).contiguous()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}) + "\n"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kind", choices=[*CONFIGS, "all"], default="mla")
    args = parser.parse_args()
    kinds = list(CONFIGS) if args.kind == "all" else [args.kind]
    for kind in kinds:
        path = write_model(args.out / f"tiny-{kind}", kind)
        size = sum(f.stat().st_size for f in path.iterdir())
        print(f"wrote {path} ({size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
