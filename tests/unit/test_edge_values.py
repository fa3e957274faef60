"""Values read at the edge (issue 37 items 4 and 6): what a user's file or option holds is a
one-line error with its exit code, never a traceback or a silent default."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from opsctl.core.errors import OpsctlError, ProfileError, UsageError
from opsctl.core.yamlread import MAX_NODES, YamlRefused, load_yaml
from opsctl.observe import alertmanager
from opsctl.render import outdir, placement

RECEIVERS = "receivers:\n- name: critical\n- name: warning\n"
LAUGHS = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6))
HOSTILE_YAML = {
    "recursive-list": "nodeAffinity: &a [*a]\n",
    "recursive-map": "nodeAffinity: &a {x: *a}\n",
    "long-integer": "nodeAffinity: {weight: " + "9" * 5000 + "}\n",
    "deep": "nodeAffinity: " + "[" * 3000 + "]" * 3000 + "\n",
    "laughs": LAUGHS,
}


def test_load_yaml_reads_plain_documents_and_shared_aliases() -> None:
    assert load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}
    assert load_yaml("") is None


@pytest.mark.parametrize("case", sorted(HOSTILE_YAML))
def test_load_yaml_refuses_what_would_crash_or_stall_a_reader(case: str) -> None:
    with pytest.raises(YamlRefused) as refused:
        load_yaml(HOSTILE_YAML[case])
    assert isinstance(refused.value, yaml.YAMLError)
    assert "9999" not in str(refused.value)


def test_the_expansion_bound_counts_aliases_as_they_expand() -> None:
    assert MAX_NODES < 10 ** 7  # LAUGHS's last anchor expands to more than 10^7 nodes
    shorter = LAUGHS.rsplit("\n", 3)[0] + "\n"  # up to `e`: about 10^5 nodes, read
    assert load_yaml(shorter)["e"][0][0][0][0] == [1] * 10


@pytest.mark.parametrize("case", sorted(HOSTILE_YAML))
def test_a_hostile_affinity_file_is_a_usage_error(tmp_path: Path, case: str) -> None:
    path = tmp_path / "affinity.yaml"
    path.write_text(HOSTILE_YAML[case])
    with pytest.raises(UsageError, match="--affinity"):
        placement.affinity(path)


@pytest.mark.parametrize("extra", ["spare: &a [*a]\n", "spare: " + "7" * 5000 + "\n"])
def test_a_hostile_receivers_file_is_a_profile_error(tmp_path: Path, extra: str) -> None:
    path = tmp_path / "receivers.yml"
    path.write_text(RECEIVERS.replace("- name: warning\n", f"- name: warning\n  {extra}"))
    with pytest.raises(ProfileError, match="cannot read receivers file"):
        alertmanager.load_receivers(path)


def test_a_render_record_with_a_huge_integer_is_not_a_record(tmp_path: Path) -> None:
    (tmp_path / outdir.RECORD).write_text('{"format": ' + "1" * 5000 + "}")
    with pytest.raises(UsageError, match="not JSON"):
        outdir.read_record(tmp_path)
    (tmp_path / outdir.RECORD).write_text(json.dumps({"format": 1}))
    with pytest.raises(UsageError, match="is not a record"):
        outdir.read_record(tmp_path)


# --- records read back: their schema version, the paths they name --------------------------


def _decide_run(tmp_path: Path) -> Path:
    from test_decide import Run

    run = Run(tmp_path)
    run.decide(("baseline", "gathercast"))
    return run.out


@pytest.mark.parametrize("version", [1, 99, "2"])
def test_decide_rescore_refuses_another_schema_version(tmp_path: Path, version: object) -> None:
    from opsctl.decide import app as decide_app

    out = _decide_run(tmp_path)
    data = json.loads((out / "decide.json").read_text())
    data["schema_version"] = version
    (out / "decide.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match="not a decide report of schema_version 2"):
        decide_app.rescore(out, None)


def test_a_nul_byte_in_a_recorded_path_is_one_line(tmp_path: Path) -> None:
    from opsctl.decide import app as decide_app
    from opsctl.traffic.bench.records import load_report

    out = _decide_run(tmp_path)
    data = json.loads((out / "decide.json").read_text())
    first = data["variants"][0]["runs"][0]
    bench_dir = (out / first["bench_report"]).parent
    first["bench_report"] = "a\0b/bench.json"
    (out / "decide.json").write_text(json.dumps(data))
    rescored = decide_app.rescore(out, None)  # a report that cannot be read back is a note
    assert "could not be pooled" in (rescored.report.variants[0].bench_note or "")
    bench = json.loads((bench_dir / "bench.json").read_text())
    levels = bench["variants"][0]["levels"]
    levels[0]["requests_file"] = "requests/\0.jsonl"
    (bench_dir / "bench.json").write_text(json.dumps(bench))
    with pytest.raises(UsageError, match="not a relative path"):
        load_report(bench_dir)
    levels[0]["requests_file"] = levels[1]["requests_file"].replace("/", "//")  # the same file
    (bench_dir / "bench.json").write_text(json.dumps(bench))
    with pytest.raises(UsageError, match="named by two levels"):
        load_report(bench_dir)  # so --rescore and decide parse each file once


def test_smoke_and_tune_records_of_another_version_are_refused(tmp_path: Path) -> None:
    from opsctl.traffic import smoke_report
    from opsctl.tune import state

    written = next(_decide_run(tmp_path).glob("*/smoke.json"))
    assert smoke_report.load_reference(written).passed is not None  # as written: read
    data = json.loads(written.read_text())
    data["schema_version"] = 99
    written.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="not a smoke report"):
        smoke_report.load_reference(written)
    question = state.Question(profile="sim", variant="baseline", knobs={}, concurrency=1,
                              requests=1, input_words=1, output_tokens=1)
    path = state.TuneState(question=question).save(tmp_path)
    assert state.load_state(tmp_path).question == question
    path.write_text(path.read_text().replace('"version": 1', '"version": 7'))
    with pytest.raises(UsageError, match="not a tune state file"):
        state.load_state(tmp_path)


# --- the tokenizer: read under a cap, a vocabulary to draw from --------------------------------


def test_a_tokenizer_with_an_empty_vocabulary_is_refused(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")  # installed by scripts/setup.sh
    from opsctl.traffic.bench.workloads import WorkloadSpec, build, load_tokenizer

    path = tmp_path / "tokenizer.json"
    path.write_text(tokenizers.Tokenizer(tokenizers.models.BPE()).to_str())
    with pytest.raises(UsageError, match="vocabulary is empty"):
        load_tokenizer(path)
    with pytest.raises(UsageError, match="vocabulary is empty"):
        build(WorkloadSpec(name="random", tokenizer=path))


def test_a_tokenizer_is_read_under_its_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from opsctl.traffic.bench import workloads

    path = tmp_path / "tokenizer.json"
    model = tokenizers.models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]")
    path.write_text(tokenizers.Tokenizer(model).to_str())
    assert workloads.load_tokenizer(path).get_vocab_size() == 3
    monkeypatch.setattr(workloads, "MAX_TOKENIZER_BYTES", path.stat().st_size - 1, raising=False)
    with pytest.raises(UsageError, match="larger than"):
        workloads.load_tokenizer(path)


# --- a trace's span against the sweep's deadline -------------------------------------------


def _trace(tmp_path: Path, last_ms: float) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": stamp, "input_length": 8, "output_length": 4,
                                        "hash_ids": [0]}) + "\n" for stamp in (0, last_ms)))
    return path


def test_a_trace_longer_than_the_sweeps_deadline_is_refused_up_front(tmp_path: Path) -> None:
    from opsctl.traffic.bench.plan import BenchOptions
    from opsctl.traffic.bench.workloads import WorkloadSpec, build
    from opsctl.traffic.settings import DEADLINE_CAP_S, BenchSettings

    far = build(WorkloadSpec(name="mooncake-trace", dataset_path=_trace(tmp_path, 1e9)))
    with pytest.raises(UsageError, match="beyond the sweep's deadline of 604800 s"):
        BenchOptions(BenchSettings(concurrency=(1,)), workload=far)  # 11.6 days > 7 days
    with pytest.raises(UsageError, match="beyond the sweep's deadline of 86400 s"):
        BenchOptions(BenchSettings(concurrency=(1,), deadline_s=86400), workload=far)
    near = build(WorkloadSpec(name="mooncake-trace", dataset_path=_trace(tmp_path, 60_000)))
    options = BenchOptions(BenchSettings(concurrency=(1, 2)), workload=near)
    assert options.deadline() <= 2 * DEADLINE_CAP_S


# --- options checked while the command line is parsed: exit 2, nothing run ----------------


@pytest.mark.parametrize("argv", [
    ["render", "k8s", "--out", "OUT", "--name", ""],
    ["render", "k8s", "--out", "OUT", "-v", ""],
    ["render", "k8s", "--out", "OUT", "-p", " "],
    ["render", "k8s", "--out", "OUT", "--model-pvc", ""],
    ["render", "k8s", "--out", "OUT", "--cache-pvc", ""],
    ["render", "k8s", "--out", "OUT", "--router-image", ""],
    ["render", "k8s", "--out", "OUT", "--router-image", "a b"],
    ["render", "k8s", "--out", "OUT", "--router-image", "repo/app:1\nkind: Secret"],
    ["profile", "resolve", "--gpu-name", ""],
    ["profile", "resolve", "-v", ""],
    ["monitor", "compose", "--config-dir", ""],
    ["monitor", "up", "--config-dir", "", "--dry-run"],
    ["build", "-v", "", "--dry-run"],
])
def test_an_empty_or_malformed_option_is_a_usage_error_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    from typer.testing import CliRunner

    from opsctl.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # monitor's default folder
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [str(out) if arg == "OUT" else arg for arg in argv])
    assert result.exit_code == 2, result.output
    assert "Invalid value" in result.output and "Traceback" not in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("field", "value", "words"), [
    ("name", "", "--name ''"), ("model_pvc", "", "--model-pvc ''"),
    ("cache_pvc", "Bad_Name", "--cache-pvc 'Bad_Name'"), ("router_image", "", "--router-image"),
    ("router_image", "a b", "not an image reference"), ("namespace", "", "--namespace"),
])
def test_render_settings_refuse_what_no_cluster_takes(field: str, value: str, words: str) -> None:
    from opsctl.render.settings import RenderSettings

    with pytest.raises(UsageError, match=re.escape(words)):
        RenderSettings(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["/k", "p/", "a/b/c", "Bad_Prefix.example/k", "", "-k"])
def test_a_label_key_follows_kubernetes_grammar(key: str) -> None:
    with pytest.raises(UsageError, match="not a Kubernetes label or taint key"):
        placement.node_selector([f"{key}=v"])
    with pytest.raises(UsageError, match="not a Kubernetes label or taint key"):
        placement.toleration(f"{key}:NoSchedule")


def test_good_label_keys_are_kept() -> None:
    assert placement.node_selector(["nvidia.com/gpu.product=A", "zone=b"]) == {
        "nvidia.com/gpu.product": "A", "zone": "b"}


def test_both_rescore_commands_end_in_one_line_on_a_nul_byte(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from opsctl.cli import app

    out = _decide_run(tmp_path)
    data = json.loads((out / "decide.json").read_text())
    bench_dir = (out / data["variants"][0]["runs"][0]["bench_report"]).parent
    bench = json.loads((bench_dir / "bench.json").read_text())
    bench["variants"][0]["levels"][0]["requests_file"] = "requests/\0.jsonl"
    (bench_dir / "bench.json").write_text(json.dumps(bench))
    runner = CliRunner()
    rescored = runner.invoke(app, ["bench", "--rescore", str(bench_dir), "--goodput", "tpot:80"])
    # (the CLI's top, cli/app.main, prints an OpsctlError as one line with its exit code)
    assert isinstance(rescored.exception, UsageError), rescored.output
    assert "not a relative path" in rescored.exception.message
    decided = runner.invoke(app, ["decide", "-p", "sim", "--rescore", str(out)])
    assert isinstance(decided.exception, OpsctlError | SystemExit | None), decided.exception
    rescored_report = json.loads((out / "decide-rescored.json").read_text())
    assert "could not be pooled" in rescored_report["variants"][0]["bench_note"]
