"""A tiny local model and tokenizer, built here so nothing is downloaded: a random one-layer
Llama and a word-level tokenizer made with the `tokenizers` library.

Shared by the component tests that serve it (`transformers serve`) and by the benchmarks that
need a local tokenizer directory (bench/client_compare.py gives it to opsctl's token-exact
random workload and to sglang.bench_serving).
"""

from __future__ import annotations

from pathlib import Path

VOCAB = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(61)]


def build_tiny_tokenizer(out: Path) -> Path:
    """The word-level tokenizer alone (tokenizer.json and the transformers config beside it),
    loadable by `tokenizers` and by transformers' AutoTokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    fast.save_pretrained(out)
    return out


def build_tiny_model(out: Path) -> Path:
    """The tokenizer and a random one-layer Llama; special tokens are suppressed so every
    answer is text and runs to max_tokens."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    build_tiny_tokenizer(out)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(VOCAB), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=4096, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config)
    model.generation_config.suppress_tokens = [0, 1, 2]
    model.save_pretrained(out)
    return out
