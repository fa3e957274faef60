"""`opsctl bench` sweeps against the sglang simulator over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SimServer

from opsctl.core.errors import EXIT_LAUNCH, EXIT_SMOKE, EXIT_USAGE, LaunchError
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.report import verdict_error
from opsctl.traffic.bench.serving import write_report_files
from opsctl.traffic.bench.sweep import Target, run_bench, sweep
from opsctl.traffic.settings import BenchSettings

StartSim = Callable[..., SimServer]
FAST = {"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "2"}


def sim(start: StartSim, *args: str, **env: str) -> str:
    wait = "listen" if env.get("OPSCTL_SIM_FAULT") == "hang" else "ready"
    return start(env={**FAST, **env}, args=["--served-model-name", "glm-5", *args],
                 wait=wait).url


def small(api_key: str | None = None, **overrides: object) -> BenchOptions:
    values: dict[str, object] = {"concurrency": (1, 4), "requests_per_level": 8,
                                 "input_words": 16, "output_tokens": 8,
                                 "request_timeout_s": 10.0}
    values.update(overrides)
    return BenchOptions(BenchSettings.model_validate(values), api_key=api_key)


def test_sweep_measures_every_level(sim_server: StartSim) -> None:
    result = asyncio.run(sweep("sim", sim(sim_server), small()))
    assert result.error is None and result.failed_requests == 0
    assert [lv.concurrency for lv in result.levels] == [1, 4]
    for level in result.levels:
        assert (level.requests, level.completed, level.warmup_requests) == (8, 8, level.concurrency)
        # ignore_eos + max_tokens fixes the output length, counted from the usage chunk.
        assert level.output_tokens == 8 * 8
        assert level.token_count_source == "usage"
        assert level.prompt_tokens_mean is not None and level.prompt_tokens_mean > 0
        for pcts in (level.ttft_ms, level.itl_ms, level.tpot_ms, level.e2e_ms):
            assert pcts.p50 is not None and pcts.p50 <= pcts.p90 <= pcts.p99  # type: ignore[operator]
        assert level.output_tokens_per_s > 0 and level.requests_per_s > 0
    assert result.model is not None and result.model.served_name == "glm-5"


def test_chat_api_works_too(sim_server: StartSim) -> None:
    result = asyncio.run(sweep("sim", sim(sim_server), small(concurrency=(2,), api="chat")))
    assert result.failed_requests == 0
    assert result.levels[0].output_tokens == 8 * 8


def test_server_errors_are_counted_and_fail_the_run(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server, OPSCTL_SIM_FAULT="error_rate", OPSCTL_SIM_ERROR_RATE="0.5")
    report = run_bench([Target("sim", url)], small(concurrency=(2,)))
    level = report.variants[0].levels[0]
    # The simulator fails exactly half of the 10 generation requests (2 warm-up + 8 measured).
    assert level.failed + level.warmup_failed == 5
    assert level.errors == {"http_status": 5}
    assert "HTTP 500" in level.error_examples[0]
    assert report.failed_requests == 5 and not report.passed
    error = verdict_error(report, tmp_path)
    assert error is not None and error.exit_code == EXIT_SMOKE


def test_stream_cut_fails_the_warmup_and_aborts_the_sweep(sim_server: StartSim,
                                                           tmp_path: Path) -> None:
    url = sim(sim_server, OPSCTL_SIM_FAULT="stream_cut", OPSCTL_SIM_STREAM_CUT_AFTER="3")
    report = run_bench([Target("sim", url)], small(concurrency=(2, 4), requests_per_level=4))
    variant = report.variants[0]
    assert len(variant.levels) == 1  # no level after a failed warm-up
    level = variant.levels[0]
    assert (level.requests, level.completed, level.warmup_failed) == (0, 0, 2)
    assert level.errors == {"stream_cut": 2}
    assert (level.aborted or "").startswith("warm-up failed: none of 2")
    assert "concurrency 2" in (variant.stopped or "")
    assert level.tpot_ms.p50 is None  # nothing measured from failed requests
    error = verdict_error(report, tmp_path)
    assert error is not None and error.exit_code == EXIT_SMOKE


def test_hang_past_the_request_timeout(sim_server: StartSim) -> None:
    url = sim(sim_server, OPSCTL_SIM_FAULT="hang")
    report = run_bench([Target("sim", url)],
                       small(concurrency=(2,), requests_per_level=2, request_timeout_s=0.5))
    level = report.variants[0].levels[0]
    assert level.errors == {"timeout": 2}  # the warm-up's; the level is then aborted
    assert level.requests == 0 and (level.aborted or "").startswith("warm-up failed")
    assert not report.passed


def test_slow_first_token_shows_in_ttft_not_as_failure(sim_server: StartSim) -> None:
    fast = asyncio.run(sweep("a", sim(sim_server, OPSCTL_SIM_TTFT_MS="20"),
                             small(concurrency=(1,), requests_per_level=2)))
    slow = asyncio.run(sweep("b", sim(sim_server, OPSCTL_SIM_TTFT_MS="20",
                                      OPSCTL_SIM_FAULT="slow_first_token"),
                             small(concurrency=(1,), requests_per_level=2)))
    assert fast.failed_requests == slow.failed_requests == 0
    # x20 on the first token: an order of magnitude, far beyond scheduling noise.
    assert slow.levels[0].ttft_ms.p50 > 5 * fast.levels[0].ttft_ms.p50  # type: ignore[operator]


def test_connection_refused_is_recorded_and_exits_4(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = run_bench([Target("gone", f"http://127.0.0.1:{port}")], small())
    assert report.variants[0].error is not None
    assert "ServerUnreachable" in report.variants[0].error
    error = verdict_error(report, tmp_path)
    assert error is not None and error.exit_code == EXIT_LAUNCH


def test_ambiguous_model_name_is_a_usage_error(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server, OPSCTL_SIM_EXTRA_MODELS="other")
    report = run_bench([Target("sim", url)], small())
    assert "'glm-5', 'other'" in (report.variants[0].error or "")
    error = verdict_error(report, tmp_path)
    assert error is not None and error.exit_code == EXIT_USAGE
    assert run_bench([Target("sim", url)], small(model="other")).passed


def test_api_key_is_sent_and_masked(sim_server: StartSim, tmp_path: Path) -> None:
    key = "sk-bench-sentinel-key-7777"
    url = sim(sim_server, "--api-key", key)
    without = run_bench([Target("sim", url)], small(concurrency=(1,), requests_per_level=2))
    assert not without.passed  # 401 on /v1/models
    report = run_bench([Target("sim", url)],
                       small(concurrency=(1,), requests_per_level=2, api_key=key))
    assert report.passed and report.api_key == "****7777"
    write_report_files(report, tmp_path)
    for path in tmp_path.iterdir():
        if path.suffix in (".json", ".md"):
            assert key not in path.read_text()


def test_two_variants_side_by_side(sim_server: StartSim, tmp_path: Path) -> None:
    slow = sim(sim_server, OPSCTL_SIM_ITL_MS="8")
    fast = sim(sim_server, OPSCTL_SIM_ITL_MS="4")
    report = run_bench([Target("baseline", slow), Target("gathercast", fast)],
                       small(concurrency=(1, 2), requests_per_level=4, output_tokens=16))
    assert report.passed
    write_report_files(report, tmp_path)
    table = (tmp_path / "bench.md").read_text()
    assert "| concurrency | metric | baseline |" in table and "gathercast (Δ vs baseline)" in table
    base, other = report.variants
    # Half the ITL: the faster variant's TPOT is clearly lower at every level.
    for b, o in zip(base.levels, other.levels, strict=True):
        assert o.tpot_ms.p50 < b.tpot_ms.p50  # type: ignore[operator]


class _Launcher:
    """Serves every variant from one simulator; `broken` fails to launch."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.calls: list[str] = []

    def up(self, variant: str) -> str:
        self.calls.append(f"up {variant}")
        if variant == "broken":
            raise LaunchError("container exited while loading")
        return self.url

    def down(self, variant: str) -> None:
        self.calls.append(f"down {variant}")


def test_launch_and_stop_are_called_per_variant(sim_server: StartSim) -> None:
    launcher = _Launcher(sim(sim_server))
    report = run_bench([Target("a"), Target("b")], small(concurrency=(1,), requests_per_level=2),
                       launcher=launcher)
    assert report.passed
    assert launcher.calls == ["up a", "down a", "up b", "down b"]
    assert all(v.launched_by_bench for v in report.variants)


def test_a_failed_launch_still_stops_and_goes_on(sim_server: StartSim) -> None:
    launcher = _Launcher(sim(sim_server))
    report = run_bench([Target("broken"), Target("ok")],
                       small(concurrency=(1,), requests_per_level=2), launcher=launcher)
    assert launcher.calls == ["up broken", "down broken", "up ok", "down ok"]
    assert report.variants[0].error is not None and report.variants[1].error is None
    assert not report.passed


@pytest.mark.parametrize("levels", [(3,)])
def test_requests_default_to_four_per_concurrency(levels: tuple[int, ...]) -> None:
    options = BenchOptions(BenchSettings(concurrency=levels))
    assert options.requests_at(3) == 16 and options.requests_at(64) == 256


def test_a_saturated_server_ends_the_sweep_with_the_reason(sim_server: StartSim) -> None:
    """One request at a time (--max-running-requests 1): at 4 concurrent streams the output
    throughput stays where it was at 1 while E2E latency queues up about 4x."""
    url = sim(sim_server, "--max-running-requests", "1")
    result = asyncio.run(sweep("sim", url, small(concurrency=(1, 4, 8), saturation_gain=0.5)))
    assert [lv.concurrency for lv in result.levels] == [1, 4]
    assert result.levels[0].sweep_end is None
    assert (result.levels[1].sweep_end or "").startswith("saturated: output throughput")
    assert result.stopped is None and result.failed_requests == 0  # a planned end, not a failure
    unlimited = asyncio.run(sweep("sim", sim(sim_server), small(concurrency=(1, 4),
                                                                saturation_gain=0.5)))
    assert [lv.sweep_end for lv in unlimited.levels] == [None, None]  # throughput rose


def test_an_error_rate_over_the_ceiling_ends_the_sweep(sim_server: StartSim) -> None:
    url = sim(sim_server, OPSCTL_SIM_FAULT="error_rate", OPSCTL_SIM_ERROR_RATE="0.5")
    result = asyncio.run(sweep("sim", url, small(concurrency=(2, 4), max_error_rate=0.2)))
    assert [lv.concurrency for lv in result.levels] == [2]
    assert result.levels[0].sweep_end == ("error rate 50.0% (5 of 10 requests) above the 20.0% "
                                          "ceiling")
