"""Report files: markdown deltas vs the first variant, PNG plots, JSON written afresh."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from opsctl.core.errors import EXIT_LAUNCH, EXIT_SMOKE, EXIT_USAGE, UsageError
from opsctl.traffic.bench.gpu_sample import GpuFigure
from opsctl.traffic.bench.markdown import delta_percent, markdown_table
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.records import load_report
from opsctl.traffic.bench.report import (
    SCHEMA_VERSION,
    BenchConfig,
    BenchReport,
    ClientInfo,
    LevelResult,
    VariantResult,
    verdict_error,
)
from opsctl.traffic.bench.server_sampler import CacheFigure, GaugeFigure, ServerFigures
from opsctl.traffic.bench.serving import level_row, write_report_files
from opsctl.traffic.bench.stats import summarize
from opsctl.traffic.bench.sweep import parse_goodput
from opsctl.traffic.client import RequestResult
from opsctl.traffic.served import ModelResolution
from opsctl.traffic.settings import BenchSettings
from opsctl.traffic.view import write_plots


def _variant(name: str, itl: float, failed: int = 0) -> VariantResult:
    def request(i: int) -> RequestResult:
        return RequestResult(ok=True, ttft_s=0.1, e2e_s=0.1 + 10 * itl, output_tokens=11,
                             itl_s=[itl] * 10, token_source="usage", finish_reason="length")

    levels = [summarize(c, [request(i) for i in range(c)]
                        + [RequestResult(ok=False, error_kind="timeout", error="x")] * failed,
                        [], duration_s=1.0 + 10 * itl)
              for c in (1, 2)]
    model = ModelResolution(served_name="glm-5", served_name_source="test", listed=["glm-5"])
    return VariantResult(variant=name, base_url=f"http://{name}", model=model, levels=levels,
                         failed_requests=failed * len(levels))


def _report(*variants: VariantResult) -> BenchReport:
    options = BenchOptions(BenchSettings(concurrency=(1, 2)))
    failed = sum(v.failed_requests for v in variants)
    return BenchReport(
        started_at="2026-01-01T00:00:00+00:00", duration_s=1.0, config=options.config(),
        client=ClientInfo(hostname="h", platform="p", python="3.11", cpu_count=2),
        variants=list(variants), failed_requests=failed,
        passed=failed == 0 and all(v.error is None for v in variants),
    )


def test_delta_percent() -> None:
    assert delta_percent(74.1, 95.6) == " (-22.5%)"
    assert delta_percent(13.5, 10.5) == " (+28.6%)"
    assert delta_percent(None, 1.0) == "" and delta_percent(1.0, 0.0) == ""


def test_markdown_table_shows_each_variant_with_its_delta() -> None:
    table = markdown_table(_report(_variant("baseline", 0.100), _variant("gathercast", 0.075)))
    header = table.splitlines()[0]
    assert (
        header.startswith("| concurrency | metric | baseline |")
        and "gathercast (Δ vs baseline)" in header
    )
    itl_row = next(line for line in table.splitlines() if line.startswith("| 1 | ITL p50"))
    assert "| 100.00 |" in itl_row and "75.00 (-25.0%)" in itl_row


def test_outputs_are_written_fresh(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots are the [plot] extra")  # PNGs asserted
    report = _report(_variant("baseline", 0.02), _variant("gathercast", 0.015))
    (tmp_path / "bench.json").write_text("stale content that must disappear")
    written = write_report_files(report, tmp_path) + write_plots(report, tmp_path)
    assert {p.name for p in written} == {"bench.json", "bench.md", "bench_serving.jsonl",
                                         "bench_serving.csv", "tpot.png", "ttft.png",
                                         "throughput.png", "pareto.png"}
    assert json.loads((tmp_path / "bench.json").read_text())["kind"] == "bench"
    rows = [
        json.loads(line) for line in (tmp_path / "bench_serving.jsonl").read_text().splitlines()
    ]
    assert [(r["tag"], r["max_concurrency"]) for r in rows] == [
        ("baseline", 1), ("baseline", 2), ("gathercast", 1), ("gathercast", 2)]
    assert rows[0]["median_itl_ms"] == 20.0 and "slo_attainment" not in rows[0]  # no SLO
    for png in ("tpot.png", "ttft.png", "throughput.png", "pareto.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in written)


def _measured_level() -> LevelResult:
    """One level under an SLO, with the server's accept length and prefix-cache counters."""
    fast = RequestResult(ok=True, ttft_s=0.1, e2e_s=0.6, output_tokens=11, itl_s=[0.05] * 10,
                         token_source="usage", finish_reason="length")
    slow_start = dataclasses.replace(fast, ttft_s=3.0, e2e_s=3.5)
    level = summarize(4, [fast, fast, slow_start, RequestResult(ok=False, error_kind="timeout",
                                                                error="x")], [], 2.0,
                      slo=parse_goodput(["ttft:2000", "tpot:60"]))
    level.server = ServerFigures(
        interval_s=2.0, spec_accept_length=GaugeFigure(mean=2.6, max=2.9, samples=3),
        cache=CacheFigure(prompt_tokens=4000, cached_tokens=1000, by_source={"device": 1000}))
    return level


def test_a_row_carries_accept_length_attainment_per_limit_and_the_cache_report(
        tmp_path: Path) -> None:
    variant = _variant("mtp", 0.05)
    variant.levels = [_measured_level()]
    report = _report(variant)
    row = level_row(report, variant, variant.levels[0])
    assert row["accept_length"] == 2.6
    # 4 measured: 3 meet TPOT (60 ms), 2 meet TTFT (2 s), 2 meet both; the failure meets none
    assert (row["slo_attainment"], row["slo_attainment_by_metric"]) == (
        0.5, {"ttft": 0.5, "tpot": 0.75})
    assert row["cache_report"] == {
        "total_prompt_tokens": 4000, "total_cached_tokens": 1000, "cache_hit_rate_pct": 25.0,
        "device_cached_tokens": 1000, "host_cached_tokens": 0, "storage_cached_tokens": None,
        "storage_backend": None}
    plain = _variant("plain", 0.05)
    assert level_row(report, plain, plain.levels[0])["accept_length"] is None  # as sglang: None
    assert "cache_report" not in level_row(report, plain, plain.levels[0])  # not sampled


def test_the_csv_has_a_row_per_level_and_a_column_per_scalar_key(tmp_path: Path) -> None:
    variant = _variant("mtp", 0.05)
    variant.levels = [_measured_level(), *variant.levels]
    write_report_files(_report(variant), tmp_path)
    with (tmp_path / "bench_serving.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["max_concurrency"] for row in rows] == ["4", "1", "2"]
    first = rows[0]
    assert first["cache_report.cache_hit_rate_pct"] == "25.0"
    assert first["slo_attainment_by_metric.tpot"] == "0.75" and first["opsctl.failed"] == "1"
    assert rows[1]["cache_report.cache_hit_rate_pct"] == ""  # not sampled there: an empty cell
    assert not [column for column in first if column.startswith("server_info")]


def test_a_csv_cell_a_spreadsheet_would_run_as_a_formula_is_written_as_text(
        tmp_path: Path) -> None:
    """A variant's name is the profile's, any text: a cell that starts with = + - @ or a tab
    is a formula in Excel, LibreOffice and Sheets."""
    write_report_files(_report(_variant("=HYPERLINK(\"http://x\")", 0.05),
                               _variant("@SUM(1+1)", 0.05)), tmp_path)
    with (tmp_path / "bench_serving.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    cells = [cell for row in rows for cell in row.values()]
    assert "'=HYPERLINK(\"http://x\")" in cells and "'@SUM(1+1)" in cells
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "@", "\t", "\r")]
    assert not [cell for cell in cells if cell[:1] == "-" and not _number(cell)]


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_verdict_exit_codes(tmp_path: Path) -> None:
    assert verdict_error(_report(_variant("a", 0.01)), tmp_path) is None
    failed = verdict_error(_report(_variant("a", 0.01, failed=1)), tmp_path)
    assert failed is not None and failed.exit_code == EXIT_SMOKE
    broken = VariantResult(variant="b", base_url="http://b", error="ServerUnreachable: x",
                           error_exit_code=EXIT_LAUNCH)
    unreachable = verdict_error(_report(_variant("a", 0.01), broken), tmp_path)
    assert unreachable is not None and unreachable.exit_code == EXIT_LAUNCH


def _charted() -> BenchReport:
    """Two variants on an 8-GPU server (its /server_info) under a TPOT SLO of 60 ms."""
    runs = [_variant("baseline", 0.04), _variant("gathercast", 0.03)]
    for run in runs:
        run.server_info = {"tp_size": 4, "pp_size": 1, "dp_size": 2, "enable_dp_attention": False}
        for level in run.levels:
            level.server = ServerFigures(interval_s=2.0, gpus=[
                GpuFigure(index=i, samples=1, name="NVIDIA RTX PRO 6000") for i in range(8)])
    report = _report(*runs)
    report.profile = "glm5"
    report.config = report.config.model_copy(update={"slo_tpot_ms": 60.0})
    return report


def _horizontal_lines(ax: Any) -> list[float]:
    """The y of each line drawn across the whole axes (axhline: x from 0 to 1 of the axes)."""
    return [line.get_ydata()[0] for line in ax.get_lines() if list(line.get_xdata()) == [0, 1]]


def test_charts_start_at_zero_and_say_what_they_are_of_with_the_slo_drawn() -> None:
    matplotlib = pytest.importorskip("matplotlib", reason="the plots are the [plot] extra")
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from opsctl.traffic import view

    report = _charted()
    tpot = view.latency_chart(plt, report, ("tpot.png", "TPOT", "tpot_ms", "slo_tpot_ms"))
    ttft = view.latency_chart(plt, report, ("ttft.png", "TTFT", "ttft_ms", "slo_ttft_ms"))
    pareto = view.pareto_chart(plt, report)
    for fig in (tpot, ttft, pareto, view.throughput_chart(plt, report)):
        (ax,) = fig.axes
        assert ax.get_ylim()[0] == 0  # zero-based: a 0.3% change is not drawn as a spike
        title = ax.get_title(loc="left")
        for part in ("glm-5", "8 GPUs (NVIDIA RTX PRO 6000)", "ISL ~256 words / OSL 256 tokens",
                     "profile glm5", "baseline, gathercast", "2026-01-01 00:00 UTC"):
            assert part in title, (part, title)
        plt.close(fig)
    (ax,) = tpot.axes
    assert _horizontal_lines(ax) == [60.0] and ax.get_ylim()[1] > 60  # the SLO, with room
    assert len(ax.collections) == 2  # a p90-p99 band per variant
    assert _horizontal_lines(ttft.axes[0]) == []  # no TTFT limit stated: no line
    (ax,) = pareto.axes
    assert "per GPU (/8)" in ax.get_ylabel()  # tp 4 x dp 2 without DP attention
    baseline = ax.get_lines()[0]  # every level: tokens/s per user is 1000 / TPOT p50
    assert list(baseline.get_xdata()) == pytest.approx([25.0, 25.0], rel=0.01)
    level = report.variants[0].levels[0]
    assert baseline.get_ydata()[0] == pytest.approx(level.output_tokens_per_s / 8)
    assert [t.get_text() for t in ax.texts][:1] == ["c1"]


@pytest.mark.parametrize(("info", "count"), [
    ({"tp_size": 8}, 8), ({"tp_size": 4, "pp_size": 2}, 8),
    ({"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}, 8),
    ({"tp_size": 2, "dp_size": 4}, 8), (None, None), ({"pp_size": 2}, None),
    ({"tp_size": "8"}, None)])
def test_gpu_count_from_server_info(info: dict[str, Any] | None, count: int | None) -> None:
    from opsctl.traffic.view import gpu_count

    assert gpu_count(info) == count


def test_plots_are_optional_without_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain install (no matplotlib) still finishes: no PNG, no error, and a hint to get them."""
    import sys

    from opsctl.traffic import view

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert view.write_plots(_report(_variant("baseline", 0.02)), tmp_path) == []
    assert list(tmp_path.iterdir()) == []
    assert "pip install" in view.PLOTS_HINT


def test_names_with_dollar_signs_are_drawn_as_text_not_parsed_as_math(tmp_path: Path) -> None:
    """Variant, model, profile and GPU names are any text (a profile's, a server's): matplotlib
    read `$...$` in a title or legend as mathtext, and one it cannot parse was a ValueError
    after the whole sweep."""
    from opsctl.traffic import view

    report = _report(_variant("cost$\\undefined{$", 0.02), _variant("$5 plan", 0.03))
    written = view.write_plots(report, tmp_path)
    assert sorted(p.name for p in written) == ["pareto.png", "throughput.png", "tpot.png",
                                               "ttft.png"]


def test_the_config_records_the_settings_model_itself(tmp_path: Path) -> None:
    """Each setting's name, type and default are BenchSettings' own: the runtime options and
    the report's config hold the model, never a copy of its fields, and bench.json reads back
    with the settings the sweep ran with."""
    settings = BenchSettings(concurrency=(1, 2), requests_per_level=5, input_words=64,
                             request_rate=2.0, deadline_s=30.0, client_workers=2,
                             api="chat", ignore_eos=False)
    assert not set(BenchConfig.model_fields) & set(BenchSettings.model_fields)
    assert not {f.name for f in dataclasses.fields(BenchOptions)} & set(BenchSettings.model_fields)
    config = BenchOptions(settings, arrival_seed=3).config()
    assert config.settings == settings and config.sweep_deadline_s == 30.0
    assert config.arrival == "Poisson arrivals at 2 req/s (seed 3) under the concurrency cap"
    assert (config.dataset_name, config.random_input_len, config.driver) == ("words", 64, "opsctl")
    report = _report(_variant("baseline", 0.1)).model_copy(update={"config": config})
    write_report_files(report, tmp_path)
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 2
    assert data["config"]["settings"] == settings.model_dump(mode="json")
    assert load_report(tmp_path).config == config
    # Every knob, the workload's too, with the value the sweep ran with.
    assert set(data["config"]["settings"]) == set(BenchSettings.model_fields)
    assert {key: data["config"]["settings"][key] for key in (
        "dataset", "seed", "gsp_groups", "gsp_prompts_per_group", "gsp_prefix_len",
        "multi_turn", "trace_scale")} == {"dataset": None, "seed": 0, "gsp_groups": 8,
                                          "gsp_prompts_per_group": 8, "gsp_prefix_len": 512,
                                          "multi_turn": 1, "trace_scale": 1.0}


def test_a_report_of_another_schema_version_is_refused_in_one_line(tmp_path: Path) -> None:
    """schema_version 1 had every setting as a field of `config`: --rescore says which version
    it reads (exit 2), never a traceback or a half-read report."""
    write_report_files(_report(_variant("baseline", 0.1)), tmp_path)
    data = json.loads((tmp_path / "bench.json").read_text())
    config = data["config"]
    data["schema_version"] = 1
    data["config"] = {**config.pop("settings"), **config,
                      "deadline_s": config.pop("sweep_deadline_s")}
    (tmp_path / "bench.json").write_text(json.dumps(data))
    with pytest.raises(UsageError) as caught:
        load_report(tmp_path)
    assert "schema_version 2" in caught.value.message and "\n" not in caught.value.message
    assert caught.value.exit_code == EXIT_USAGE


def test_a_report_of_version_2_shape_but_another_version_is_refused(tmp_path: Path) -> None:
    write_report_files(_report(_variant("baseline", 0.1)), tmp_path)
    data = json.loads((tmp_path / "bench.json").read_text())
    data["schema_version"] = 7
    (tmp_path / "bench.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match="not a bench report of schema_version 2"):
        load_report(tmp_path)
