"""Workloads the field replays: a Mooncake trace (arrival times, lengths, prefix-sharing block
ids) and the token-exact `random` default, unit by unit and against the simulator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import SimServer

from opsctl.core.errors import UsageError
from opsctl.traffic.bench import arrival as arrival_module
from opsctl.traffic.bench.arrival import Arrival, Batch, drive
from opsctl.traffic.bench.levels import PhasePlan
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.bench.workers import split
from opsctl.traffic.bench.workloads import (
    TRACE_BLOCK_TOKENS,
    Workload,
    WorkloadSpec,
    build,
    read_trace,
)
from opsctl.traffic.client import RequestResult
from opsctl.traffic.settings import DEADLINE_CAP_S, BenchSettings

tokenizers = pytest.importorskip("tokenizers")  # installed by scripts/setup.sh

StartSim = Callable[..., SimServer]
# The shape of kvcache-ai/Mooncake's traces: ms after the first request, token lengths, one
# hash id per 512-token block (the first two requests share block 0, the last repeats 1's).
TRACE = [
    {"timestamp": 0, "input_length": 1100, "output_length": 8, "hash_ids": [0, 1, 2]},
    {"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 3]},
    {"timestamp": 3052, "input_length": 300, "output_length": 4, "hash_ids": [4]},
    {"timestamp": 4000, "input_length": 1100, "output_length": 8, "hash_ids": [0, 1, 5]},
]


def write_trace(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def tokenizer_path(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    text = ["the quick brown fox jumps over the lazy dog", "shared prefixes make caches warm"] * 50
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def common_prefix(a: str, b: str) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


# --- the trace --------------------------------------------------------------------------------


@pytest.mark.parametrize("with_tokenizer", [False, True])
def test_shared_hash_ids_give_shared_prefixes_and_nothing_more(
        tmp_path: Path, tokenizer_path: Path, with_tokenizer: bool) -> None:
    spec = WorkloadSpec(
        name="mooncake-trace",
        dataset_path=write_trace(tmp_path / "t.jsonl", TRACE),
        tokenizer=tokenizer_path if with_tokenizer else None,
        seed=3,
    )
    work = build(spec)
    items = work.items or []
    assert work.name == "mooncake-trace" and len(items) == 4
    assert [item.output_tokens for item in items] == [8, 5, 4, 8]
    first, second, third, fourth = (item.prompt for item in items)
    block0 = common_prefix(first, second)
    assert block0 > 0 and common_prefix(first, third) < 3  # a different first block
    assert common_prefix(first, fourth) > block0  # blocks 0 and 1 shared
    assert first[:common_prefix(first, fourth)] == fourth[:common_prefix(first, fourth)]
    assert first != fourth  # block 2 vs block 5
    assert build(spec).items == items  # seeded: the same prompts again
    if with_tokenizer:
        assert all(item.input_tokens for item in items)
    else:  # about one token per word
        assert [len(item.prompt.split()) for item in items] == [1100, 700, 300, 1100]


def test_a_partial_last_block_is_a_prefix_of_the_full_block(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": TRACE_BLOCK_TOKENS, "output_length": 2,
             "hash_ids": [7]},
            {"timestamp": 1, "input_length": 100, "output_length": 2, "hash_ids": [7]}]
    items = build(WorkloadSpec(name="mooncake-trace",
                               dataset_path=write_trace(tmp_path / "t.jsonl", rows))).items or []
    assert items[0].prompt.startswith(items[1].prompt.rstrip())
    assert len(items[1].prompt.split()) == 100


def test_arrivals_are_the_timestamps_in_seconds_times_the_scale(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.jsonl", TRACE)
    assert build(WorkloadSpec(name="mooncake-trace", dataset_path=path)).arrivals_s == (
        0.0, 0.0, 3.052, 4.0)
    half = build(WorkloadSpec(name="mooncake-trace", dataset_path=path, trace_scale=0.5))
    assert half.arrivals_s == (0.0, 0.0, 1.526, 2.0)
    assert "4 requests over 2 s" in (half.note or "")


@pytest.mark.parametrize(("line", "says"), [
    ("not json", "not JSON"),
    ('{"timestamp": -1, "input_length": 5, "output_length": 5}', "timestamp"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 5}', "token counts"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [-2]}', "hash_ids"),
])
def test_a_bad_trace_line_is_a_usage_error_naming_it(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(TRACE[0]) + "\n" + line + "\n")
    with pytest.raises(UsageError) as caught:
        read_trace(path)
    assert f"{path}:2: " in caught.value.message and says in caught.value.message


def test_timestamps_that_go_back_are_refused(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.jsonl", [TRACE[2], TRACE[0]])
    with pytest.raises(UsageError, match="go back in time"):
        build(WorkloadSpec(name="mooncake-trace", dataset_path=path))


def test_drive_sends_each_request_at_its_recorded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock that sleeping advances: the send times are the schedule's, wrapping past
    its end with no gap."""
    now = [0.0]
    sent: list[tuple[int, float]] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        await real_sleep(0)  # what was sent runs first, then the clock moves on
        now[0] += max(0.0, seconds)

    async def send(index: int) -> RequestResult:
        sent.append((index, now[0]))
        return RequestResult(ok=True)

    monkeypatch.setattr(arrival_module.asyncio, "sleep", sleep)
    schedule = Arrival(schedule_s=(0.0, 0.5, 2.0))
    asyncio.run(drive(send, range(5), 4, schedule, Batch(), clock=lambda: now[0]))
    assert sent == [(0, 0.0), (1, 0.5), (2, 2.0), (3, 2.0), (4, 2.5)]
    assert "trace replay: 3 recorded arrivals" in schedule.describe()


def test_a_trace_is_replayed_by_one_client_process() -> None:
    plan = PhasePlan(4, 40, 16, Arrival(schedule_s=(0.0, 1.0)))
    assert split(plan, 4) == [plan]


def test_a_trace_replays_against_the_simulator(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "2", "OPSCTL_SIM_ITL_MS": "1"},
                     args=["--served-model-name", "glm-5"]).url
    rows = [{**row, "timestamp": row["timestamp"] // 40} for row in TRACE]  # ~0.1 s in all
    work = build(WorkloadSpec(name="mooncake-trace", dataset_path=write_trace(
        tmp_path / "t.jsonl", rows)))
    options = BenchOptions(BenchSettings(concurrency=(2,), requests_per_level=len(rows),
                                         request_timeout_s=10.0), workload=work)
    assert options.arrival.schedule_s == work.arrivals_s  # the trace's own arrival times
    report = run_bench([Target("sim", url)], options)
    assert report.passed, report.model_dump_json()
    level = report.variants[0].levels[0]
    assert level.completed == 4 and level.output_tokens == sum(r["output_length"] for r in rows)
    assert report.config.dataset_name == "mooncake-trace"
    assert report.config.arrival.startswith("trace replay")


def test_every_level_replays_the_trace_from_its_first_arrival(
        sim_server: StartSim, tmp_path: Path) -> None:
    """Each level's measured requests are the trace's rows in order (a later level used to
    start where the one before had left off, shifted by its warm-up)."""
    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "2", "OPSCTL_SIM_ITL_MS": "1"},
                     args=["--served-model-name", "glm-5"]).url
    rows = [{**row, "timestamp": row["timestamp"] // 40} for row in TRACE]
    work = build(WorkloadSpec(name="mooncake-trace", dataset_path=write_trace(
        tmp_path / "t.jsonl", rows)))
    options = BenchOptions(BenchSettings(concurrency=(1, 2, 3), requests_per_level=len(rows),
                                         request_timeout_s=10.0), workload=work)
    report = run_bench([Target("sim", url)], options)
    assert report.passed, report.model_dump_json()
    kept = report._requests  # (requests file, the level's records), level by level
    assert len(kept) == 3
    for name, level in kept:
        records = sorted(level.records, key=lambda r: r["start_s"])
        outputs = [r["output_tokens"] for r in records]
        # rows 0 and 1 arrive together (either may start first), then rows 2 and 3
        assert sorted(outputs[:2]) == [5, 8] and outputs[2:] == [4, 8], (name, outputs)


def test_a_long_traces_own_length_is_added_to_the_capped_deadline() -> None:
    hour = Arrival(schedule_s=(0.0, 1800.0, 3600.0))  # a 1-h trace of 3 requests
    trace = Workload("mooncake-trace", None, WorkloadSpec(name="mooncake-trace"),
                     arrivals_s=hour.schedule_s)
    options = BenchOptions(BenchSettings(concurrency=(1, 2), requests_per_level=3,
                                         request_timeout_s=1000.0), workload=trace)
    assert options.deadline() == DEADLINE_CAP_S + 2 * 3600.0
    assert hour.replay_s(3) == 3600.0 and hour.replay_s(5) == 3600.0 + 1800.0
    assert hour.replay_s(0) == 0.0 and Arrival().replay_s(7) == 0.0


# --- token-exact `random` is the default whenever a tokenizer is there -------------------------


def test_the_default_is_token_exact_random_with_a_tokenizer(tokenizer_path: Path) -> None:
    work = build(WorkloadSpec(name="random", defaulted=True, input_len=33,
                              tokenizer=tokenizer_path))
    assert work.name == "random" and work.note is None
    assert {item.input_tokens for item in work.items or []} == {33}


def test_the_default_falls_back_to_words_and_says_why(tmp_path: Path) -> None:
    plain = build(WorkloadSpec(name="random", defaulted=True))
    assert plain.name == "words" and "no tokenizer found" in (plain.note or "")
    missing = build(WorkloadSpec(name="random", defaulted=True, tokenizer=tmp_path / "absent"))
    assert missing.name == "words" and "no tokenizer.json there" in (missing.note or "")
    with pytest.raises(UsageError, match=r"no tokenizer\.json there"):  # asked for by name
        build(WorkloadSpec(name="random", tokenizer=tmp_path / "absent"))


# --- multi-turn chat sessions -------------------------------------------------------------------


def test_session_turns_interleave_sessions_and_keep_turn_order() -> None:
    work = build(WorkloadSpec(name="words", turns=3, session_width=2))
    assert [work.session_turn(i) for i in range(8)] == [
        (0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 0), (3, 0)]


def test_each_turn_sends_its_sessions_history_with_the_servers_answers(
        sim_server: StartSim) -> None:
    from opsctl.traffic.bench.levels import RequestSpec
    from opsctl.traffic.client import make_client

    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"},
                     args=["--served-model-name", "glm-5"]).url
    work = build(WorkloadSpec(name="words", input_len=20, output_len=6, turns=3,
                              session_width=2, seed=4))
    spec = RequestSpec("chat", "glm-5", 0.0, True, 10.0, work)
    sent: dict[int, RequestResult] = {}

    async def go() -> None:
        async with make_client(url, None) as client:
            async def send(index: int) -> RequestResult:
                sent[index] = await spec.send(client, index)
                return sent[index]
            await drive(send, range(6), 2, Arrival(), Batch())

    asyncio.run(go())
    assert all(result.ok for result in sent.values())
    for session in (0, 1):
        turns = [sent[i] for i in range(6) if work.session_turn(i)[0] == session]
        counts = [result.prompt_tokens or 0 for result in turns]
        # each turn carries the previous prompts and answers: its prompt grows every turn
        assert counts[0] < counts[1] < counts[2], counts
    assert not spec.sessions._history  # the last turn's history is not kept


def test_a_phase_numbers_its_own_sessions_as_wide_as_its_concurrency() -> None:
    work = build(WorkloadSpec(name="words", turns=3, session_width=64))
    phase = work.for_phase(10, 1)
    assert [phase.session_turn(i) for i in range(10, 16)] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert work.session_turn(10) == (10, 0)  # the sweep's workload is not changed


def test_a_low_level_sends_every_turn_not_only_first_turns(sim_server: StartSim) -> None:
    """Concurrency 1 and 6 requests of 3-turn sessions: two whole sessions, each turn's prompt
    longer than the one before (sessions as wide as the largest level sent first turns only)."""
    from opsctl.traffic.bench.levels import InProcess, Phase, PhasePlan, RequestSpec
    from opsctl.traffic.client import make_client

    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"},
                     args=["--served-model-name", "glm-5"]).url
    work = build(WorkloadSpec(name="words", input_len=20, output_len=6, turns=3, seed=4,
                              session_width=64))
    spec = RequestSpec("chat", "glm-5", 0.0, True, 10.0, work)
    phase = Phase()

    async def go() -> None:
        async with make_client(url, None) as client:
            await InProcess(client, spec).run(PhasePlan(5, 6, 1), phase, None)

    asyncio.run(go())
    counts = [result.prompt_tokens or 0 for result in phase.batch.results]
    assert all(result.ok for result in phase.batch.results) and len(counts) == 6
    for session in (counts[:3], counts[3:]):
        assert session[0] < session[1] < session[2], counts
    assert counts[3] < counts[2]  # a new session starts with no history


@pytest.mark.parametrize(("args", "says"), [
    (["--multi-turn", "2"], "add --api chat"),
    (["--multi-turn", "2", "--api", "chat", "--client-workers", "2"], "drop --client-workers"),
    (["--dataset-name", "mooncake-trace", "--request-rate", "5"], "drop --request-rate"),
])
def test_what_a_replay_cannot_do_is_refused_in_one_line(
        opsctl: Any, sim_server: StartSim, tmp_path: Path, args: list[str], says: str) -> None:
    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"}).url
    trace = write_trace(tmp_path / "t.jsonl", TRACE)
    done = opsctl("bench", "--base-url", url, "--concurrency", "2", "--requests", "4",
                  "--out", str(tmp_path / "out"), "--dataset-path", str(trace), *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stdout + done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("mounted", [True, False])
def test_the_default_through_bench_uses_the_profiles_tokenizer_when_it_is_mounted(
        sim_server: StartSim, tmp_path: Path, mounted: bool) -> None:
    """No --dataset-name: token-exact with the profile's model mount; without a mount, words,
    where naming `random` would have been exit 2."""
    from benchprofile import bench_request, sim_profile
    from tinymodel import build_tiny_tokenizer

    from opsctl.traffic import app as traffic
    from opsctl.traffic.client import make_client

    weights = build_tiny_tokenizer(tmp_path / "weights") if mounted else None
    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "1", "OPSCTL_SIM_ITL_MS": "1"},
                     args=["--served-model-name", "glm-5"]).url
    request = bench_request(sim_profile(tmp_path, weights), url, out_dir=tmp_path / "out",
                            input_words=7, dataset=None)  # the default: random or words
    result = traffic.bench(request, launcher=lambda profile: None,  # type: ignore[arg-type,return-value]
                           push=lambda *a: None, plot=lambda report, out: [],
                           client_factory=make_client)
    assert result.error is None, result.error
    config = result.report.config
    if mounted:
        assert config.dataset_name == "random"
        assert f"tokenizer {weights / 'tokenizer.json'}" in (config.workload_note or "")  # type: ignore[operator]
    else:
        assert config.dataset_name == "words"
        assert "no tokenizer found" in (config.workload_note or "")
        assert "model.host_path" in (config.workload_note or "")
