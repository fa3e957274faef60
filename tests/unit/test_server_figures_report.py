"""Server figures in the bench report: optional (old reports load), and shown beside the
client's own ITL/TTFT in bench.md and the terminal view."""

from __future__ import annotations

import json

from rich.console import Console

from opsctl.traffic.bench.gpu_sample import GpuFigure
from opsctl.traffic.bench.markdown import markdown_table
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.report import BenchReport, ClientInfo, LevelResult, VariantResult
from opsctl.traffic.bench.server_sampler import GaugeFigure, LatencyFigure, ServerFigures
from opsctl.traffic.bench.stats import summarize
from opsctl.traffic.client import RequestResult
from opsctl.traffic.settings import BenchSettings
from opsctl.traffic.view import render_bench


def level(concurrency: int, server: ServerFigures | None) -> LevelResult:
    request = RequestResult(ok=True, ttft_s=0.1, e2e_s=0.3, output_tokens=11, itl_s=[0.02] * 10,
                            token_source="usage", finish_reason="length")
    result = summarize(concurrency, [request] * concurrency, [], duration_s=1.0)
    return result.model_copy(update={"server": server})


def report(*levels: LevelResult) -> BenchReport:
    run = VariantResult(variant="gathercast", base_url="http://x", levels=list(levels))
    return BenchReport(started_at="2026-01-01T00:00:00+00:00", duration_s=1.0,
                       config=BenchOptions(BenchSettings(concurrency=(1, 2))).config(),
                       client=ClientInfo(hostname="h", platform="p", python="3.11", cpu_count=2),
                       variants=[run], failed_requests=0, passed=True)


SAMPLED = ServerFigures(
    interval_s=1.0, scrapes=5, scrape_failures=1, last_failure="GET /metrics: HTTP 500",
    running=GaugeFigure(mean=1.5, max=2, samples=3), queued=GaugeFigure(mean=0, max=0, samples=3),
    kv_usage=GaugeFigure(mean=0.1, max=0.125, samples=3),
    itl_ms=LatencyFigure(count=20, mean=19.5, p50=18.0, p90=19.0, p99=40.0, lower_bounds=["p99"]),
    ttft_ms=LatencyFigure(unavailable="reset: a count went down during the level"),
    gpus=[GpuFigure(index=0, samples=3, util_mean_pct=80, util_max_pct=99, mem_used_max_mib=90000),
          GpuFigure(index=1, samples=3, util_mean_pct=60, util_max_pct=70, mem_used_max_mib=91000)])


def test_an_old_report_without_server_figures_still_loads() -> None:
    data = json.loads(report(level(1, None)).model_dump_json())
    del data["variants"][0]["levels"][0]["server"]
    loaded = BenchReport.model_validate(data)
    assert loaded.variants[0].levels[0].server is None


def test_bench_md_puts_client_and_server_side_by_side() -> None:
    unavailable = ServerFigures(interval_s=1.0, unavailable="the server has no /metrics")
    text = markdown_table(report(level(1, SAMPLED), level(2, unavailable)))
    rows = {line.split(" | ")[1]: line for line in text.splitlines()
            if line.startswith("| gathercast | ")}
    assert "| 20.00 / 19.50 | 20.00 / ~18.00 | 20.00 / >=40.00 | 100.00 / n/a |" in rows["1"]
    assert "| 1.5/2 | 0.0/0 | 12.5% | - | 70% (2 GPU) | 91000 |" in rows["1"]
    assert "server figures: unavailable (the server has no /metrics)" in rows["2"]
    assert "gathercast c=1: server TTFT: reset: a count went down" in text
    assert "1 of 5 /metrics scrapes failed (GET /metrics: HTTP 500)" in text


def test_no_section_when_nothing_was_sampled() -> None:
    assert "Client vs server" not in markdown_table(report(level(1, None)))


def test_the_terminal_view_shows_the_same_cells() -> None:
    console = Console(record=True, width=400)
    render_bench(report(level(1, SAMPLED)), console)
    shown = console.export_text()
    assert "client vs server" in shown and "~18.00" in shown and ">=40.00" in shown
    assert "server TTFT: reset" in shown
