"""The public eval datasets opsctl fetches itself: where each comes from and its pin, one row each.

The sha256 of each file was computed from the real file, not typed in: openai/grade-school-math's
`grade_school_math/data/test.jsonl` at commit 3101c7d5072418e28b9008a6636bde82a006892c (the
repository's newest commit, 2021-11-19; git blob e4c2ff4942b9a78bd74f04141224c11e28d12dc9,
749,738 bytes, 1,319 lines), read from a snapshot of that repository with `git show
3101c7d:grade_school_math/data/test.jsonl | sha256sum`. sglang 0.5.23's own GSM8K check
(`sglang/test/few_shot_gsm8k.py:69`) downloads the same file from the repository's master
branch; opsctl names the commit, so the URL cannot serve other bytes than the pin.
"""

from __future__ import annotations

from dataclasses import dataclass

MIRROR_ENV = "OPSCTL_DATASETS_URL"  # a mirror's base URL replaces the scheme and host below


@dataclass(frozen=True)
class PublicDataset:
    name: str  # the file name under <state dir>/datasets/
    url: str
    sha256: str
    size: int  # bytes: the download is capped a little above it
    source: str  # what it is, for messages


GSM8K_TEST = PublicDataset(
    name="gsm8k-test.jsonl",
    url="https://raw.githubusercontent.com/openai/grade-school-math/"
        "3101c7d5072418e28b9008a6636bde82a006892c/grade_school_math/data/test.jsonl",
    sha256="3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    size=749_738,
    source="GSM8K's test split (openai/grade-school-math, 1,319 questions)",
)
