"""verify's 0.5.15 facts against what a real sglang 0.5.15 server answered (H200 device run).

The fixtures are the real responses (tests/fixtures/real-sglang-0.5.15/README.md says how they
were captured); the argv is the one that server was started with
(bench/results/sglang_h200/argv-*.txt).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from opsctl.verify import checks
from opsctl.verify.facts import VERSION_KEY, facts_for

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "real-sglang-0.5.15"
RUN = ROOT / "bench" / "results" / "sglang_h200"


def _argv(variant: str) -> list[str]:
    words = shlex.split((RUN / f"argv-{variant}.txt").read_text())
    return words[words.index("sglang.launch_server") + 1 :]


@pytest.mark.parametrize(
    ("variant", "server_file"),
    [("baseline", "server_info.json"), ("gathercast", "server_info.gathercast.json")],
)
def test_every_recorded_field_matches_the_real_server(variant: str, server_file: str) -> None:
    facts = facts_for("0.5.15")
    assert facts is not None
    server_info = json.loads((FIXTURES / server_file).read_text())
    model_info = json.loads((FIXTURES / "model_info.json").read_text())
    expected = checks.expectations(facts, _argv(variant), "DeepseekV2ForCausalLM")
    found = {c.field: c for c in checks.compare(facts, expected, server_info, model_info)}
    assert not [c for c in found.values() if c.status == "mismatch"], found
    for name in (
        "model_path",
        "served_model_name",
        "tp_size",
        "kv_cache_dtype",
        "attention_backend",
        "cuda_graph_max_bs",
    ):
        assert found[name].status == "ok", (name, found[name])
    # a non-DSA checkpoint: the DSA defaults are not claimed, and the server leaves them unset
    assert found["dsa_decode_backend"].status == "unknown"
    assert server_info["dsa_decode_backend"] is None
    node = server_info
    for part in VERSION_KEY:
        node = node[part]
    assert node == "0.5.15"


def test_every_fact_key_exists_in_the_real_responses() -> None:
    payloads = {
        "server_info": json.loads((FIXTURES / "server_info.json").read_text()),
        "model_info": json.loads((FIXTURES / "model_info.json").read_text()),
    }
    facts = facts_for("0.5.15")
    assert facts is not None
    for name, fact in facts.items():
        found, _ = checks.lookup(payloads[fact.endpoint], fact.key)
        assert found, f"{name}: /{fact.endpoint} has no {'.'.join(fact.key)}"
