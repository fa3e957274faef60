"""bench's workloads: token-exact random prompts, ShareGPT files, shared-prefix groups."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SimServer

from opsctl.core.errors import UsageError
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.bench.workloads import WorkloadSpec, build, load_tokenizer, parse_dataset_name
from opsctl.traffic.settings import BenchSettings

tokenizers = pytest.importorskip("tokenizers")  # installed by scripts/setup.sh; CI fails a skip

StartSim = Callable[..., SimServer]


@pytest.fixture
def tokenizer_path(tmp_path: Path) -> Path:
    """A BPE tokenizer trained here on a small text: multi-character merges, so decoded random
    ids do not always re-encode to the same count (what the exactness loop is for)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    text = ["the quick brown fox jumps over the lazy dog", "shared prefixes make caches warm",
            "tokens per second and time to first token"] * 50
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_random_prompts_are_token_exact_and_seeded(tokenizer_path: Path) -> None:
    spec = WorkloadSpec(name="random", input_len=37, output_len=9, seed=5,
                        tokenizer=tokenizer_path)
    work = build(spec)
    tok = load_tokenizer(tokenizer_path)
    assert work.name == "random" and work.note is None
    for index in range(10):
        item = work.item(index)
        assert len(tok.encode(item.prompt, add_special_tokens=False).ids) == 37
        assert item.input_tokens == 37 and item.output_tokens == 9
    assert build(spec).item(3) == work.item(3)
    assert build(WorkloadSpec(name="random", input_len=37, seed=6,
                              tokenizer=tokenizer_path)).item(3) != work.item(3)


def test_random_without_a_tokenizer_says_it_falls_back_to_words() -> None:
    work = build(WorkloadSpec(name="random", input_len=16))
    assert work.name == "words" and "no --tokenizer" in (work.note or "")
    assert len(work.item(0).prompt.split()) == 16


def test_tokenizer_directory_and_bad_paths(tokenizer_path: Path, tmp_path: Path) -> None:
    assert load_tokenizer(tokenizer_path.parent).get_vocab_size() > 0
    with pytest.raises(UsageError):
        load_tokenizer(tmp_path / "absent")
    bad = tmp_path / "bad" / "tokenizer.json"
    bad.parent.mkdir()
    bad.write_text("{}")
    with pytest.raises(UsageError):
        load_tokenizer(bad)
    with pytest.raises(UsageError):
        parse_dataset_name("mmlu")


def test_sharegpt_first_human_turn_and_reference_length(tmp_path: Path,
                                                        tokenizer_path: Path) -> None:
    data = [
        {"id": "a", "conversations": [{"from": "human", "value": "the quick brown fox"},
                                      {"from": "gpt", "value": "jumps over the lazy dog"},
                                      {"from": "human", "value": "ignored"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn first"}]},
        {"id": "c", "conversations": [{"from": "system", "value": "s"},
                                      {"from": "human", "value": "time to first token"},
                                      {"from": "gpt", "value": "tokens per second"}]},
        "not an object",
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    words = build(WorkloadSpec(name="sharegpt", dataset_path=path))
    assert sorted((i.prompt, i.output_tokens) for i in words.items or []) == [
        ("the quick brown fox", 5), ("time to first token", 3)]
    assert "words" in (words.note or "")
    exact = build(WorkloadSpec(name="sharegpt", dataset_path=path, tokenizer=tokenizer_path))
    tok = load_tokenizer(tokenizer_path)
    for item in exact.items or []:
        assert item.input_tokens == len(tok.encode(item.prompt, add_special_tokens=False).ids)
    with pytest.raises(UsageError):
        build(WorkloadSpec(name="sharegpt"))
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(UsageError):
        build(WorkloadSpec(name="sharegpt", dataset_path=tmp_path / "empty.json"))


def test_shared_prefix_groups_share_exactly_their_prefix(tokenizer_path: Path) -> None:
    work = build(WorkloadSpec(name="generated-shared-prefix", groups=3, prompts_per_group=4,
                              prefix_len=20, input_len=6, tokenizer=tokenizer_path))
    items = work.items or []
    assert len(items) == 12
    prefixes = [item.prompt.split("\n", 1)[0] for item in items]
    assert len(set(prefixes[:4])) == 1 and len(set(prefixes)) == 3
    assert len({item.prompt for item in items}) == 12  # the questions differ


def test_token_exact_and_shared_prefix_runs_against_the_simulator(
        sim_server: StartSim, tokenizer_path: Path) -> None:
    url = sim_server(env={"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "2"},
                     args=["--served-model-name", "glm-5"]).url
    for spec in (WorkloadSpec(name="random", input_len=24, output_len=4,
                              tokenizer=tokenizer_path),
                 WorkloadSpec(name="generated-shared-prefix", groups=2, prompts_per_group=3,
                              prefix_len=32, input_len=8, output_len=4)):
        options = BenchOptions(BenchSettings(concurrency=(2,), requests_per_level=6,
                                             request_timeout_s=10.0, output_tokens=4),
                               workload=build(spec))
        report = run_bench([Target("sim", url)], options)
        assert report.passed, report.model_dump_json()
        level = report.variants[0].levels[0]
        assert level.completed == 6 and level.output_tokens == 6 * 4
        assert report.config.dataset_name == spec.name


def test_a_shared_prefix_workload_past_the_memory_cap_is_refused_before_it_is_built() -> None:
    """Issue 25: `--gsp-groups 100000 --gsp-prompts-per-group 100000` was a MemoryError. Just
    over the cap (20.2 million words): built whole before the fix, refused at once after it."""
    spec = WorkloadSpec(name="generated-shared-prefix", groups=200, prompts_per_group=1000,
                        prefix_len=100, input_len=1)
    with pytest.raises(UsageError, match="--gsp-groups"):
        build(spec)


def test_a_range_ratio_draws_each_length_from_its_range_and_one_keeps_them_exact() -> None:
    """sglang.bench_serving's --random-range-ratio: prompt and answer lengths of request i
    drawn, seeded, from [length x ratio, length]; 1 (the default) every length exact; a
    dataset whose data sets the lengths refuses it (exit 2)."""
    varied = build(WorkloadSpec(name="words", input_len=100, output_len=40, range_ratio=0.5))
    items = [varied.item(i) for i in range(200)]
    prompts = [len(item.prompt.split()) for item in items]
    answers = [item.output_tokens for item in items]
    assert min(prompts) >= 50 and max(prompts) <= 100 and len(set(prompts)) > 10
    assert min(answers) >= 20 and max(answers) <= 40 and len(set(answers)) > 5
    again = build(WorkloadSpec(name="words", input_len=100, output_len=40, range_ratio=0.5))
    assert [again.item(i) for i in range(200)] == items  # seeded
    exact = build(WorkloadSpec(name="words", input_len=100, output_len=40))
    assert {exact.item(i).output_tokens for i in range(50)} == {40}
    with pytest.raises(UsageError, match="the data sets its lengths"):
        build(WorkloadSpec(name="sharegpt", range_ratio=0.5))


def test_isl_osl_pairs_give_each_request_its_shape_in_turn() -> None:
    """One sweep over a mix of shapes: request i takes pair i mod N (a range ratio then draws
    within that pair); a dataset whose data sets the lengths refuses them (exit 2)."""
    from opsctl.traffic.bench.workloads import parse_length_pairs

    pairs = parse_length_pairs("64:8, 16:32")
    assert pairs == ((64, 8), (16, 32))
    mixed = build(WorkloadSpec(name="words", pairs=pairs))
    shapes = [(len(mixed.item(i).prompt.split()), mixed.item(i).output_tokens) for i in range(4)]
    assert shapes == [(64, 8), (16, 32), (64, 8), (16, 32)]
    drawn = build(WorkloadSpec(name="words", pairs=pairs, range_ratio=0.5))
    assert {drawn.item(i).output_tokens for i in range(0, 50, 2)} <= set(range(4, 9))
    assert {drawn.item(i).output_tokens for i in range(1, 50, 2)} <= set(range(16, 33))
    with pytest.raises(UsageError, match="the data sets its lengths"):
        build(WorkloadSpec(name="sharegpt", pairs=pairs))
    for bad in ("64", "64:0", "a:b", "1:2:3", ",".join(["8:8"] * 65)):
        with pytest.raises(UsageError, match="--isl-osl"):
            parse_length_pairs(bad)
    assert parse_length_pairs(None) == parse_length_pairs("") == ()
