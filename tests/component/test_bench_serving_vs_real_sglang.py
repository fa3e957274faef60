"""bench_serving.jsonl against the keys the real sglang 0.5.23 wheel's bench_serving writes: its
`benchmark()` result dict, GoodputMetrics' fields and the cache_report object, read from the
wheel's sources (sglang/benchmark/serving.py, goodput.py) with `ast`, never copied here."""

from __future__ import annotations

import ast
import sys
import zipfile
from pathlib import Path

import pytest

from opsctl.core import wheels
from opsctl.traffic.bench.serving import NOT_MEASURED, level_row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))
from test_bench_report import _measured_level, _report, _variant  # noqa: E402

VERSION = "0.5.23"


def _dict_keys(node: ast.Dict) -> set[str]:
    return {key.value for key in node.keys if isinstance(key, ast.Constant)}


@pytest.fixture(scope="module")
def sglang_keys() -> dict[str, set[str]]:
    """{"result": the benchmark() result dict's keys, "goodput": GoodputMetrics' fields,
    "cache_report": the cache_report object's keys}, from the wheel."""
    with zipfile.ZipFile(wheels.fetch("sglang", VERSION)) as wheel:
        serving = ast.parse(wheel.read("sglang/benchmark/serving.py"))
        goodput = ast.parse(wheel.read("sglang/benchmark/goodput.py"))
    found: dict[str, set[str]] = {}
    benchmark = next(node for node in ast.walk(serving)
                     if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)
                     and node.name == "benchmark")
    for node in ast.walk(benchmark):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id == "result":
                found["result"] = _dict_keys(node.value)
            elif isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) \
                    and target.slice.value == "cache_report":
                found["cache_report"] = _dict_keys(node.value)
    metrics = next(node for node in ast.walk(goodput)
                   if isinstance(node, ast.ClassDef) and node.name == "GoodputMetrics")
    found["goodput"] = {item.target.id for item in metrics.body
                        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    assert set(found) == {"result", "cache_report", "goodput"}, "the wheel's layout changed"
    return found


def test_every_key_is_sglangs_and_every_sglang_key_is_written_or_said_why(
        sglang_keys: dict[str, set[str]]) -> None:
    variant = _variant("mtp", 0.05)
    level = _measured_level()
    level.input_tokens = 4000  # the server counted every prompt: the input keys are written
    level.max_output_tokens_per_s, level.max_concurrent_requests = 90.0, 4  # timed successes
    variant.levels = [level]
    row = level_row(_report(variant), variant, level)
    theirs = sglang_keys["result"] | sglang_keys["goodput"] | {"cache_report"}
    assert set(row) - theirs == {"opsctl"}  # opsctl's own keys only under "opsctl"
    assert sglang_keys["result"] - set(row) == set(NOT_MEASURED)
    assert sglang_keys["goodput"] <= set(row)
    assert set(row["cache_report"]) == sglang_keys["cache_report"]
