"""bench's GPU sampling on a real GPU: idle reads as idle, a busy GPU 0 as busy, and the memory
a process holds shows in memory.used. Runs on the accelerator machine only."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_sample_under_load.py"
_spec = importlib.util.spec_from_file_location("gpu_sample_under_load", _SCRIPT)
assert _spec is not None and _spec.loader is not None
under_load = importlib.util.module_from_spec(_spec)
sys.modules["gpu_sample_under_load"] = under_load
_spec.loader.exec_module(under_load)


def test_a_busy_gpu_reads_busy_and_its_memory_shows() -> None:
    figures = under_load.measure(seconds=3.0)
    idle = {f["index"]: f for f in figures["idle"]}
    loaded = {f["index"]: f for f in figures["loaded"]}
    assert 0 in idle and 0 in loaded and loaded[0]["samples"] >= 8
    assert loaded[0]["mem_total_mib"] and loaded[0]["mem_total_mib"] > 1024
    held_mib = under_load.LOAD_BYTES / (1 << 20)
    assert loaded[0]["mem_used_max_mib"] >= (idle[0]["mem_used_max_mib"] or 0) + held_mib
    assert loaded[0]["util_max_pct"] >= 90 and loaded[0]["util_mean_pct"] >= 50
