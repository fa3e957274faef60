"""Accuracy checks beyond agreement: GSM8K few-shot accuracy, long-context probes, divergence.

dataset.py reads sha256-pinned local GSM8K-shaped files (nothing is downloaded at run time);
gsm8k.py builds sglang's few-shot prompts, extracts answers and runs the eval; score.py turns
counts into accuracy, a Wilson interval and the threshold gate; probes.py sends pass-key
(needle) and shared-prefix probes; divergence.py locates where two greedy runs first differ.
"""
