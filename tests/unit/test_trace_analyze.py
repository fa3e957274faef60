"""`trace analyze` on the committed real H200 traces and on small synthetic ones per signature."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from opsctl.core.errors import UsageError
from opsctl.trace import chrome, report, signatures
from opsctl.trace.analyze import Analysis, analyze, short_name
from opsctl.trace.app import AnalyzeRequest, analyze_path, analyze_traces

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "traces"
STOCK = ["h200-decode-stock-graph", "h200-decode-stock-eager"]
PATCHED = ["h200-decode-gathercast-graph", "h200-decode-gathercast-eager"]
CAST_NAME = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
             "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::"
             "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int)")
GEMM = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_NNT"


def fixture(name: str) -> Analysis:
    (found,) = analyze_path(FIXTURES / f"{name}.trace.json.gz", None, chrome.DEFAULT_MAX_BYTES)
    return found


def names(analysis: Analysis) -> list[str]:
    return [f.signature for f in analysis.findings]


# --- the real traces ------------------------------------------------------------------------


@pytest.mark.parametrize("name", STOCK)
def test_stock_trace_names_the_full_pool_cast(name: str) -> None:
    found = fixture(name)
    assert found.device == "NVIDIA H200" and found.step_rule == "annotation" and found.steps == 5
    cast = found.findings[0]
    assert cast.signature == "full_pool_kv_cast" and cast.severity == "bottleneck"
    assert cast.evidence["per_step"] == 16 and cast.evidence["per_layer"] == 1  # 16 layers
    assert (
        cast.evidence["kernel"] == "unrolled_elementwise_kernel<direct_copy_kernel_cuda, BFloat16>"
    )
    assert float(cast.evidence["share"]) > 0.5  # type: ignore[arg-type]
    assert "gather_then_cast" not in names(found)


@pytest.mark.parametrize("name", PATCHED)
def test_patched_trace_does_not(name: str) -> None:
    found = fixture(name)
    assert "full_pool_kv_cast" not in names(found)
    assert "gather_then_cast" in names(found)
    # The per-layer casts left (the KV write, the active rows) repeat as often but weigh little.
    casts = [row for row in found.kernels if row.kind == "copy"]
    assert casts and casts[0].count >= 16 and casts[0].share < signatures.CAST_SHARE


def test_eager_trace_shows_the_pool_shape_and_launch_overhead() -> None:
    stock = fixture("h200-decode-stock-eager")
    cast = stock.findings[0]
    assert cast.evidence["cast_input_dims"][0].startswith("[[131072, 1, 576]")  # type: ignore[index]
    idle = next(f for f in stock.findings if f.signature == "gpu_idle")
    assert "no CUDA-graph launch" in idle.verdict and stock.graph_launches == 0
    graph = fixture("h200-decode-stock-graph")
    assert graph.graph_launches == 1 and graph.host_launches <= 1


def test_compare_shows_the_cast_gone(tmp_path: Path) -> None:
    result = analyze_traces(AnalyzeRequest(
        path=FIXTURES / "h200-decode-stock-graph.trace.json.gz",
        compare=FIXTURES / "h200-decode-gathercast-graph.trace.json.gz", out_dir=tmp_path),
        plot=lambda *_: ([], "no chart"))
    moved = result.comparison
    assert moved is not None and moved.gone == ["full_pool_kv_cast"]
    assert "gather_then_cast" in moved.new
    assert moved.other_busy_ms < moved.base_busy_ms / 1.5
    kinds = {m.name: m for m in moved.kinds}
    assert kinds["copy"].delta_ms < -3.0
    text = (tmp_path / report.ANALYSIS_MD).read_text()
    assert "Full-pool KV cast" in text and "## What moved" in text
    payload = json.loads((tmp_path / report.ANALYSIS_JSON).read_text())
    assert payload["comparison"]["gone"] == ["full_pool_kv_cast"]


def test_fixtures_are_small() -> None:
    for path in FIXTURES.glob("*.trace.json.gz"):
        assert path.stat().st_size <= 1 << 20, path


# --- synthetic traces -------------------------------------------------------------------------


class Tb:
    """A tiny trace builder: steps of kernels launched by one graph launch or eagerly."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 0

    def x(self, cat: str, name: str, ts: float, dur: float, corr: int | None = None,
          **args: Any) -> None:
        if corr is not None:
            args["correlation"] = corr
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts,
                            "dur": dur, "args": args})

    def step(self, ts: float, kernels: list[tuple[str, float]], *, graph: bool = True,
             period: float = 1000.0, label: str | None = "step[DECODE bs=4]",
             syncs: int = 0) -> None:
        if label:
            self.x("user_annotation", label, ts, 50.0)
        gpu = ts + 10.0
        self.corr += 1
        if graph:
            self.x("cuda_runtime", "cudaGraphLaunch", ts + 1.0, 5.0, self.corr)
        for index, (name, dur) in enumerate(kernels):
            if not graph:
                self.corr += 1
                self.x("cuda_runtime", "cudaLaunchKernel", ts + 1.0 + index, 1.0, self.corr)
            self.x("kernel", name, gpu, dur, self.corr)
            gpu += dur
        for index in range(syncs):
            self.x("cuda_runtime", "cudaStreamSynchronize", ts + 20.0 + index, 30.0)
        assert gpu <= ts + period

    def analysis(self, tmp_path: Path, layers: int | None = None) -> Analysis:
        path = tmp_path / "t.json"
        path.write_text(json.dumps({"traceEvents": self.events}))
        found = analyze(chrome.load(path))
        signatures.judge(found, layers)
        return found


def steps(tb: Tb, kernels: list[tuple[str, float]], n: int = 3, **kw: Any) -> Tb:
    for i in range(n):
        tb.step(i * kw.get("period", 1000.0), kernels, **kw)
    return tb


def layer(cast_us: float, layers: int = 8, other: list[tuple[str, float]] | None = None
          ) -> list[tuple[str, float]]:
    rest = other or [(GEMM, 40.0)]
    return [item for _ in range(layers) for item in [(CAST_NAME, cast_us), *rest]]


def test_cast_named_when_it_repeats_per_layer_and_dominates(tmp_path: Path) -> None:
    found = steps(Tb(), layer(60.0)).analysis(tmp_path, layers=8)
    cast = found.findings[0]
    assert cast.signature == "full_pool_kv_cast" and cast.evidence["per_layer"] == 1
    assert cast.evidence["spread"] == 0


def test_small_per_layer_casts_are_not_the_signature(tmp_path: Path) -> None:
    found = steps(Tb(), layer(5.0)).analysis(tmp_path)  # 5 of 45 us: 11%
    assert "full_pool_kv_cast" not in names(found)


def test_one_big_cast_per_step_is_not_per_layer(tmp_path: Path) -> None:
    found = steps(Tb(), [(CAST_NAME, 500.0), (GEMM, 100.0)]).analysis(tmp_path)
    assert "full_pool_kv_cast" not in names(found)


def test_moe_and_nccl(tmp_path: Path) -> None:
    moe = "void flashinfer::cutlass_fused_moe_kernel<__nv_fp4_e2m1, 128>"
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    found = steps(Tb(), [(moe, 40.0), (nccl, 30.0), (GEMM, 30.0)] * 8).analysis(tmp_path)
    assert {"moe_gemm", "nccl_allreduce"} <= set(names(found))
    moe_finding = next(f for f in found.findings if f.signature == "moe_gemm")
    assert moe_finding.severity == "bottleneck"  # 40 of 100 us


def test_gpu_idle_between_graph_replays_and_without_graphs(tmp_path: Path) -> None:
    graphed = steps(Tb(), [(GEMM, 300.0)]).analysis(tmp_path)
    idle = next(f for f in graphed.findings if f.signature == "gpu_idle")
    assert "between CUDA-graph replays" in idle.verdict
    assert graphed.idle_share == pytest.approx(0.7)
    eager = steps(Tb(), [(GEMM, 30.0)] * 10, graph=False).analysis(tmp_path)
    idle = next(f for f in eager.findings if f.signature == "gpu_idle")
    assert "not running under CUDA graphs" in idle.verdict and eager.host_launches == 10
    busy = steps(Tb(), [(GEMM, 950.0)]).analysis(tmp_path)
    assert "gpu_idle" not in names(busy)


def test_host_syncs(tmp_path: Path) -> None:
    found = steps(Tb(), [(GEMM, 900.0)], syncs=10).analysis(tmp_path)
    sync = next(f for f in found.findings if f.signature == "host_sync")
    assert sync.evidence["per_step"] == 10
    one = steps(Tb(), [(GEMM, 900.0)], syncs=1).analysis(tmp_path)
    assert "host_sync" not in names(one)  # one short sync per step: not a finding


def test_a_dtoh_copy_to_pageable_memory_is_a_sync(tmp_path: Path) -> None:
    tb = steps(Tb(), [(GEMM, 900.0)])
    for i in range(3):
        tb.corr += 1
        tb.x("cuda_runtime", "cudaMemcpyAsync", i * 1000.0 + 5.0, 400.0, tb.corr)
        tb.x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", i * 1000.0 + 950.0, 2.0, tb.corr)
    found = tb.analysis(tmp_path)
    assert found.syncs[0].name == "cudaMemcpyAsync (DtoH to pageable memory)"
    assert "host_sync" in names(found)  # 400 of 1000 us blocked


def test_step_rules(tmp_path: Path) -> None:
    tb = steps(Tb(), [(GEMM, 100.0)])
    tb.x("user_annotation", "step[EXTEND bs=4 toks=512]", 5000.0, 50.0)
    found = tb.analysis(tmp_path)
    assert (found.step_rule, found.steps, found.skipped_steps) == ("annotation", 3, 1)
    by_launch = steps(Tb(), [(GEMM, 100.0)], label=None).analysis(tmp_path)
    assert (by_launch.step_rule, by_launch.steps) == ("graph-launch", 3)
    profiler = steps(Tb(), [(GEMM, 100.0)], label="ProfilerStep#7").analysis(tmp_path)
    assert profiler.step_rule == "annotation" and profiler.steps == 3
    whole = steps(Tb(), [(GEMM, 100.0)], label=None, graph=False).analysis(tmp_path)
    assert (whole.step_rule, whole.steps) == ("whole-trace", 1)
    assert "gpu_idle" not in names(whole)  # no per-step claim without steps


def test_short_names() -> None:
    assert short_name(CAST_NAME) == "unrolled_elementwise_kernel<direct_copy_kernel_cuda, BFloat16>"
    assert short_name("void (anonymous namespace)::softmax_warp_forward<float, 10>(float*)") \
        == "softmax_warp_forward"
    assert short_name(GEMM) == GEMM


# --- reading ------------------------------------------------------------------------------


def test_reading_is_bounded_and_checked(tmp_path: Path) -> None:
    big = tmp_path / "big.json.gz"
    big.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * 5000 + b"]}"))
    with pytest.raises(UsageError, match="more than"):
        chrome.load(big, max_bytes=1000)
    assert chrome.load(big).events == []
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="not JSON"):
        chrome.load(bad)
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    with pytest.raises(UsageError, match="not a Chrome trace"):
        chrome.load(other)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="no .* trace"):
        chrome.trace_files(empty)


def test_non_finite_times_are_dropped(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text('{"traceEvents": ['
                   '{"ph": "X", "cat": "kernel", "name": "a", "ts": NaN, "dur": 1},'
                   '{"ph": "X", "cat": "kernel", "name": "b", "ts": 1, "dur": Infinity},'
                   '{"ph": "X", "cat": "kernel", "name": "c", "ts": "nan", "dur": 1},'
                   '{"ph": "X", "cat": "kernel", "name": "d", "ts": 2, "dur": 3}]}')
    assert [e.name for e in chrome.load(odd).events] == ["d"]


def test_shrink_keeps_what_the_analyzer_reads(tmp_path: Path) -> None:
    tb = steps(Tb(), layer(60.0))
    tb.events.append({"ph": "X", "cat": "python_function", "name": "x.py(1): f", "ts": 1,
                      "dur": 1})
    tb.events.append({"ph": "s", "cat": "ac2g", "name": "flow", "id": 1, "ts": 1})
    doc = {"traceEvents": tb.events, "deviceProperties": [{"name": "X"}]}
    small = chrome.shrink(doc, {"layers": 8})
    assert {e["cat"] for e in small["traceEvents"]} == {"user_annotation", "cuda_runtime",
                                                       "kernel"}
    path = chrome.write_gz(small, tmp_path / "s.trace.json.gz")
    assert path.read_bytes() == chrome.write_gz(small, tmp_path / "again.gz").read_bytes()
    found = analyze(chrome.load(path))
    assert found.meta["layers"] == 8
    assert [f.signature for f in signatures.judge(found)][0] == "full_pool_kv_cast"
