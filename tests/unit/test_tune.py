"""`opsctl tune`'s search with a fake runner and a fake clock: typed knobs, grid, a failing
point, successive halving under a budget, interruption and resume, the overlay."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fakes import FakeClock

from opsctl.config.profile_models import Variant
from opsctl.config.profiles import Deployment, load_profile
from opsctl.core.errors import EXIT_INTERRUPTED, Interrupted, LaunchError, UsageError
from opsctl.tune import report, search
from opsctl.tune.app import Measure, TuneRequest, cause, tune
from opsctl.tune.settings import TuneSettings
from opsctl.tune.state import STATE_FILE, load_state

UP_S, PER_REQUEST_S, DOWN_S = 10.0, 0.5, 2.0


class FakeRunner:
    """Deploys instantly on a fake clock; TPOT is a function of the point's settings."""

    def __init__(self, clock: FakeClock, fail_when: dict[str, object] | None = None,
                 interrupt_at: int | None = None) -> None:
        self.clock, self.fail_when, self.interrupt_at = clock, fail_when or {}, interrupt_at
        self.ups: list[dict[str, object]] = []
        self.downs = 0
        self.benches: list[int] = []

    def up(self, deployment: Deployment) -> str:
        server = deployment.server.model_dump()
        self.ups.append({k: server[k] for k in ("cuda_graph_max_bs", "mem_fraction_static")})
        self.clock.sleep(UP_S)
        if self.interrupt_at == len(self.ups):
            raise KeyboardInterrupt
        if all(server[k] == v for k, v in self.fail_when.items()) and self.fail_when:
            raise LaunchError("server exited before it was ready (exit code 1): Scheduler hit",
                              details=["loading", "torch.OutOfMemoryError: CUDA out of memory.",
                                       "--- log tail ---", "bye"])
        return "http://sim"

    def bench(self, deployment: Deployment, base_url: str, concurrency: int,
              requests: int) -> Measure:
        self.benches.append(requests)
        self.clock.sleep(PER_REQUEST_S * requests)
        server = self.ups[-1]
        launched = deployment.server.model_dump()  # the point just launched, not the file's
        assert server == {k: launched[k] for k in server}
        tpot = 20.0 + (15.0 if server["cuda_graph_max_bs"] < concurrency else 0.0) \
            + 10 * float(server["mem_fraction_static"])
        return Measure(tpot_p50_ms=tpot, ttft_p50_ms=50.0, output_tokens_per_s=1000 / tpot,
                       failed_requests=0, error=None)

    def down(self, deployment: Deployment) -> None:
        self.downs += 1
        self.clock.sleep(DOWN_S)


def sim_deployment(variant: str = "baseline") -> Deployment:
    return load_profile("sim").resolve(variant)


def request(tmp_path: Path, *params: str, budget: float | None = None, resume: bool = False,
            requests: int = 16) -> TuneRequest:
    return TuneRequest(params=params or ("cuda_graph_max_bs=2,64",
                                         "mem_fraction_static=0.85,0.95"),
                       out_dir=tmp_path, resume=resume,
                       settings=TuneSettings(concurrency=4, requests=requests, input_words=16,
                                             output_tokens=8, budget_minutes=budget))


def no_plot(*_: object) -> tuple[list[Path], str | None]:
    return [], None


def test_knobs_take_the_fields_types() -> None:
    base = sim_deployment().server
    knob = search.parse_param("cuda-graph-max-bs=16, 32,16", base)
    assert knob == search.Knob("cuda_graph_max_bs", (16, 32))
    assert search.parse_param("mem_fraction_static=0.9", base).values == (0.9,)
    assert search.parse_param("chunked_prefill_size=null,4096", base).values == (None, 4096)
    assert search.parse_param("disable_shared_experts_fusion=true,false", base).values == (
        True, False)
    for bad, message in (("mem_fraction_static=1.2", "less than 1"),
                         ("cuda_graph_max_bs=x", "integer"), ("port=1,2", "not a tunable"),
                         ("nope=1", "not a tunable"), ("cuda_graph_max_bs", "NAME=v1,v2")):
        with pytest.raises(UsageError, match=message):
            search.parse_param(bad, base)
    with pytest.raises(UsageError, match="repeat"):
        search.grid([knob, knob])


def test_grid_and_halving_schedule() -> None:
    knobs = [search.Knob("a", (1, 2)), search.Knob("b", ("x", "y", "z"))]
    points = search.grid(knobs)
    assert [search.key(p) for p in points][:2] == ["a=1,b=x", "a=1,b=y"] and len(points) == 6
    assert search.rungs(6) == 3 and search.rungs(1) == 0
    assert [search.rung_requests(r, 6, 32) for r in range(4)] == [4, 8, 16, 32]
    assert [search.survivors(n) for n in (6, 3, 2, 1)] == [3, 2, 1, 1]


def test_grid_with_a_failing_point(tmp_path: Path) -> None:
    clock = FakeClock()
    runner = FakeRunner(clock, fail_when={"mem_fraction_static": 0.95})
    result = tune(request(tmp_path), sim_deployment(), runner=runner, clock=clock, plot=no_plot)
    state = result.state
    assert state.mode == search.GRID and len(state.measurements) == 4 and state.finished
    failed = [m for m in state.measurements if m.status == "failed"]
    assert [m.key for m in failed] == ["cuda_graph_max_bs=2,mem_fraction_static=0.95",
                                       "cuda_graph_max_bs=64,mem_fraction_static=0.95"]
    assert failed[0].reason.startswith("oom: server exited")  # type: ignore[union-attr]
    assert failed[0].log == ["torch.OutOfMemoryError: CUDA out of memory."]
    assert runner.downs == 4  # every point taken down, the failed ones too
    assert result.best is not None
    assert result.best.key == "cuda_graph_max_bs=64,mem_fraction_static=0.85"
    assert (tmp_path / report.TUNE_MD).read_text().count("| failed |") == 2


def test_overlay_is_a_variant_the_profile_accepts(tmp_path: Path) -> None:
    clock = FakeClock()
    result = tune(request(tmp_path), sim_deployment("gathercast"),
                  runner=FakeRunner(clock), clock=clock, plot=no_plot)
    text = (tmp_path / report.BEST_VARIANT).read_text()
    assert text.startswith("# opsctl tune")
    (name, variant), = yaml.safe_load(text)["variants"].items()
    assert name == "gathercast-tuned"
    parsed = Variant.model_validate(variant)
    assert parsed.requires_patch and parsed.env == sim_deployment("gathercast").profile \
        .variants["gathercast"].env
    assert parsed.server == {"cuda_graph_max_bs": 64, "mem_fraction_static": 0.85}
    assert result.best is not None and result.best.key in parsed.description


def test_halving_when_the_grid_exceeds_the_budget(tmp_path: Path) -> None:
    clock = FakeClock()
    runner = FakeRunner(clock)
    params = ("cuda_graph_max_bs=1,2,64,128", "mem_fraction_static=0.8,0.85")
    # A full point: 10 + 64 x 0.5 + 2 = 44 s; the 8-point grid needs 352 s, the budget is 240:
    # rung 0 (the first point in full, 7 at 8 requests) costs 156 s, rung 1 (4 points at 16)
    # 80 s, and rung 2 (2 points at 32) no longer fits.
    result = tune(request(tmp_path, *params, budget=4.0, requests=64), sim_deployment(),
                  runner=runner, clock=clock, plot=no_plot)
    state = result.state
    assert state.mode == search.HALVING and state.price_fixed_s == pytest.approx(12.0)
    by_rung: dict[int, list[str]] = {}
    for m in state.measurements:
        by_rung.setdefault(m.rung, []).append(m.key)
    assert [len(by_rung[r]) for r in sorted(by_rung)] == [8, 4]
    assert runner.benches == [64] + [8] * 7 + [16] * 4
    # Rung 1 holds the better half of rung 0: the points whose graph cap covers the batch.
    assert all("cuda_graph_max_bs=64" in k or "cuda_graph_max_bs=128" in k for k in by_rung[1])
    assert len(state.skipped) == 2 and state.spent_s <= 240.0
    assert result.best is not None and result.best.rung == 1
    assert result.best.point["mem_fraction_static"] == 0.8


def test_interrupt_keeps_the_state_and_resume_finishes(tmp_path: Path) -> None:
    clock = FakeClock()
    with pytest.raises(Interrupted) as stopped:
        tune(request(tmp_path), sim_deployment(), runner=FakeRunner(clock, interrupt_at=3),
             clock=clock, plot=no_plot)
    assert stopped.value.exit_code == EXIT_INTERRUPTED and "--resume" in stopped.value.hint
    saved = load_state(tmp_path)
    assert saved.interrupted and not saved.finished and len(saved.measurements) == 2
    runner = FakeRunner(clock)
    result = tune(request(tmp_path, resume=True), sim_deployment(), runner=runner, clock=clock,
                  plot=no_plot)
    assert len(runner.ups) == 2  # only the two points not measured before
    assert result.state.finished and len(result.state.measurements) == 4
    assert (tmp_path / STATE_FILE).is_file() and (tmp_path / report.BEST_VARIANT).is_file()


class CutDown(FakeRunner):
    """A Ctrl-C lands while the first point's server is being taken down."""

    def down(self, deployment: Deployment) -> None:
        super().down(deployment)
        if self.downs == 1:
            raise KeyboardInterrupt  # the removal was cut short here


def test_a_ctrl_c_during_a_points_down_finishes_the_down_then_stops(tmp_path: Path) -> None:
    clock = FakeClock()
    runner = CutDown(clock)
    with pytest.raises(Interrupted):
        tune(request(tmp_path), sim_deployment(), runner=runner, clock=clock, plot=no_plot)
    assert runner.downs == 2 and len(runner.ups) == 1  # the down again; no further point
    assert load_state(tmp_path).interrupted


def test_the_state_records_the_settings_and_a_resume_keeps_its_budget(tmp_path: Path) -> None:
    clock = FakeClock()
    with pytest.raises(Interrupted):
        tune(request(tmp_path, budget=60.0), sim_deployment(),
             runner=FakeRunner(clock, interrupt_at=3), clock=clock, plot=no_plot)
    assert load_state(tmp_path).settings == TuneSettings(
        concurrency=4, requests=16, input_words=16, output_tokens=8, budget_minutes=60.0)
    result = tune(request(tmp_path, resume=True), sim_deployment(), runner=FakeRunner(clock),
                  clock=clock, plot=no_plot)
    assert result.state.settings is not None and result.state.settings.budget_minutes == 60.0
    assert "8 output tokens, 600 s per request" in (tmp_path / report.TUNE_MD).read_text()


def test_resume_refuses_another_question(tmp_path: Path) -> None:
    clock = FakeClock()
    tune(request(tmp_path), sim_deployment(), runner=FakeRunner(clock), clock=clock,
         plot=no_plot)
    with pytest.raises(UsageError, match="another question"):
        tune(request(tmp_path, "cuda_graph_max_bs=8", resume=True), sim_deployment(),
             runner=FakeRunner(clock), clock=clock, plot=no_plot)
    with pytest.raises(UsageError, match="no tune-state.json"):
        tune(request(tmp_path / "empty", resume=True), sim_deployment(),
             runner=FakeRunner(clock), clock=clock, plot=no_plot)


def test_cause_names_nccl_and_flag_errors() -> None:
    nccl = LaunchError("server exited before it was ready (exit code 1): x",
                       details=["NCCL WARN NET/Socket : connect failed", "ncclSystemError"])
    assert cause(nccl)[0].startswith("nccl: ")
    flag = LaunchError("server exited before it was ready (exit code 2): x",
                       details=["launch_server: error: argument --foo: invalid choice: 'z'"])
    assert cause(flag)[0].startswith("flag: ")
    plain = LaunchError("not ready after 60 s")
    assert cause(plain) == ("not ready after 60 s", [])
