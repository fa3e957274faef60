"""bench's per-request records against the simulator: the files, the sglang row keys, re-scoring."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SimServer

from opsctl.config.sloconfig import Slo
from opsctl.core.errors import UsageError
from opsctl.core.paths import project_root
from opsctl.traffic import app as traffic
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.records import read_records
from opsctl.traffic.bench.serving import NOT_MEASURED, write_report_files
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.settings import BenchSettings

StartSim = Callable[..., SimServer]
FIXTURES = Path(__file__).parent.parent / "fixtures" / "bench_serving"
# Keys of a real sglang row opsctl leaves out on purpose (docs/smoke-and-bench.md says why):
# it has no ShareGPT output-length argument, no vision tokens, no retokenization, and
# accept_length is the server's own (each level's `server` figures).
NOT_WRITTEN = set(NOT_MEASURED)


def _options(server_figures: bool = False, **overrides: object) -> BenchOptions:
    values: dict[str, object] = {"concurrency": (1, 3), "requests_per_level": 6,
                                 "input_words": 16, "output_tokens": 8, "request_timeout_s": 10.0}
    values.update(overrides)
    return BenchOptions(BenchSettings.model_validate(values), server_figures=server_figures)


def _sim(start: StartSim) -> str:
    return start(env={"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "3"},
                 args=["--served-model-name", "glm-5", "--enable-metrics"]).url


def test_each_level_writes_its_requests(sim_server: StartSim, tmp_path: Path) -> None:
    report = run_bench([Target("base", _sim(sim_server))], _options())
    write_report_files(report, tmp_path, output_details=True)
    for level in report.variants[0].levels:
        assert level.requests_file is not None and level.requests_note is None
        records = read_records(tmp_path / level.requests_file)
        assert len(records) == level.requests == 6
        for record in records:
            assert record["ok"] and record["finish_reason"] == "length"
            assert record["output_tokens"] == 8 and len(record["gaps_s"]) == 7
            assert record["start_s"] >= 0 and 0 < record["ttft_s"] < record["e2e_s"]
            assert record["error_kind"] is None
        assert level.max_output_tokens_per_s is not None and level.max_output_tokens_per_s > 0
        assert level.max_concurrent_requests is not None
        # sglang's meaning: requests active at some time in the busiest one-second bucket.
        assert level.concurrency <= level.max_concurrent_requests <= level.requests


def test_rows_carry_the_keys_of_a_real_sglang_row(sim_server: StartSim, tmp_path: Path) -> None:
    report = run_bench([Target("base", _sim(sim_server))],
                       _options(server_figures=True, concurrency=(2,)))
    write_report_files(report, tmp_path, output_details=True)
    row = json.loads((tmp_path / "bench_serving.jsonl").read_text())
    for name in ("sglang-0.5.9-random.jsonl", "sglang-0.5.9-random-details.jsonl"):
        real = json.loads((FIXTURES / name).read_text())
        missing = set(real) - set(row) - NOT_WRITTEN
        # total_input_* are written only when the server counted every prompt (it does here).
        assert missing == set(), name
        for key in set(real) & set(row):
            if real[key] is not None and key not in ("request_rate", "tag"):
                assert isinstance(row[key], type(real[key])) or (
                    isinstance(real[key], float) and isinstance(row[key], int | float)), key
    assert row["random_input_len"] == 16 and row["random_output_len"] == 8
    assert row["random_range_ratio"] == 1.0
    assert row["accept_length"] is None  # no speculation: sglang writes None too
    cache = row["cache_report"]  # the server's own prompt and cached-token counters
    assert cache["total_prompt_tokens"] > 0 and cache["total_cached_tokens"] == 0
    assert cache["cache_hit_rate_pct"] == 0.0
    assert isinstance(row["server_info"], dict) and "version" in row["server_info"]
    assert len(row["ttfts"]) == len(row["itls"]) == len(row["errors"]) == 6
    assert row["output_lens"] == [8] * 6 and all(len(gaps) == 7 for gaps in row["itls"])


def test_rescore_judges_the_records_by_another_slo(sim_server: StartSim, tmp_path: Path) -> None:
    report = run_bench([Target("base", _sim(sim_server))], _options())
    write_report_files(report, tmp_path)
    loose = Slo.model_validate({"tpot": {"quantile": 0.5, "threshold_ms": 10_000}})
    tight = Slo.model_validate({"tpot": {"quantile": 0.5, "threshold_ms": 0.001}})
    plots: Callable[..., list[Path]] = lambda report, out: []  # noqa: E731
    good = traffic.rescore(tmp_path, loose, tmp_path / "loose", plots)
    bad = traffic.rescore(tmp_path, tight, None, plots)
    assert bad.out_dir == tmp_path / "rescored"
    for level in good.report.variants[0].levels:
        assert level.goodput is not None and level.goodput.good == 6 and level.goodput.share == 1
    for level in bad.report.variants[0].levels:
        assert level.goodput is not None and level.goodput.good == 0
    rescored = json.loads((tmp_path / "loose" / "bench.json").read_text())
    assert rescored["config"]["slo_tpot_ms"] == 10_000
    first = rescored["variants"][0]["levels"][0]["requests_file"]
    assert (tmp_path / "loose" / first).resolve().is_file()


def test_rescore_refuses_what_is_no_bench_run(tmp_path: Path) -> None:
    slo = Slo.model_validate({"tpot": {"quantile": 0.5, "threshold_ms": 80}})
    with pytest.raises(UsageError, match="bench report"):
        traffic.rescore(tmp_path, slo, None, lambda report, out: [])


def test_rescore_never_writes_over_its_run_and_falls_back_to_the_profiles_slo(
        sim_server: StartSim, tmp_path: Path) -> None:
    import yaml

    report = run_bench([Target("base", _sim(sim_server))], _options())
    run = tmp_path / "run"
    write_report_files(report, run)
    evidence = (run / "bench.json").read_bytes()
    plots: Callable[..., list[Path]] = lambda report, out: []  # noqa: E731
    slo = Slo.model_validate({"tpot": {"quantile": 0.5, "threshold_ms": 80}})
    for same in (run, run / "." / "requests" / ".."):
        with pytest.raises(UsageError, match="own directory"):
            traffic.rescore(run, slo, same, plots)
    (run / "rescored").write_text("a file where the default output goes")
    with pytest.raises(UsageError, match="--out"):
        traffic.rescore(run, slo, None, plots)
    (run / "rescored").unlink()
    again = traffic.rescore(run, slo, None, plots)  # DIR/rescored/, holding no requests files
    with pytest.raises(UsageError, match="own directory"):  # rescoring that one into DIR
        traffic.rescore(again.out_dir, slo, run, plots)
    assert (run / "bench.json").read_bytes() == evidence
    # No --goodput: the SLO of the profile named (deploy/sim.yaml: TPOT p50 60 ms).
    by_profile = traffic.rescore(run, None, tmp_path / "by-profile", plots, "sim")
    assert (
        by_profile.report.config.slo_tpot_ms == 60 and by_profile.report.config.slo_ttft_ms == 600
    )
    # A profile that states no SLO, and no --goodput: nothing to judge by.
    data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    del data["slo"]
    bare = tmp_path / "no-slo.yaml"
    bare.write_text(yaml.safe_dump(data))
    with pytest.raises(UsageError, match="needs the SLO"):
        traffic.rescore(run, None, tmp_path / "none", plots, str(bare))
    # The profile the run recorded does not load here by its name (it was a path): no SLO.
    recorded = json.loads((run / "bench.json").read_text())
    recorded["profile"] = "a-profile-given-as-a-path"
    (run / "bench.json").write_text(json.dumps(recorded))
    with pytest.raises(UsageError, match="needs the SLO"):
        traffic.rescore(run, None, tmp_path / "none2", plots)
