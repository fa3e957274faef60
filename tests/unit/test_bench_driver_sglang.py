"""`bench --driver sglang-bench`: bench_serving's command line per level, its real result rows
(tests/fixtures/bench_serving, written by sglang 0.5.9) read into the report, and the sweep run
through the engine's `exec` (FakeEngine), with the container found by the CLI's collaborator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes import FakeEngine

from opsctl.cli.root import Root
from opsctl.core.answers import Malformed
from opsctl.core.errors import EXIT_SMOKE, EXIT_USAGE, UsageError
from opsctl.core.labels import BASE_URL, MANAGED, PROFILE, ROLE, ROLE_SERVER, TRUE
from opsctl.deploy.urlserver import server_for_url
from opsctl.engine import dockerpy
from opsctl.engine.api import ExecResult, PortBinding
from opsctl.traffic.bench.driver_sglang import MAX_ROW_BYTES, SglangBench, bench_argv, workload_for
from opsctl.traffic.bench.plan import BenchOptions
from opsctl.traffic.bench.report import verdict_error
from opsctl.traffic.bench.serving import write_report_files
from opsctl.traffic.bench.serving_read import level_from_row, parse_row
from opsctl.traffic.bench.sweep import Target, run_bench
from opsctl.traffic.bench.workloads import WorkloadSpec
from opsctl.traffic.settings import BenchSettings

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "bench_serving"
ROW_059 = FIXTURES / "sglang-0.5.9-random.jsonl"
TOKENIZER = "/models/GLM-5-NVFP4"
RANDOM = WorkloadSpec(name="random", input_len=32, output_len=16, seed=1)


def _row(**changes: Any) -> dict[str, Any]:
    return {**json.loads(ROW_059.read_text()), **changes}


def _options(concurrency: tuple[int, ...] = (2,), spec: WorkloadSpec = RANDOM,
             arrival_seed: int = 0, driver: SglangBench | None = None,
             api_key: str | None = None, **fields: Any) -> BenchOptions:
    fields.setdefault("requests_per_level", 8)
    settings = BenchSettings(concurrency=concurrency, deadline_s=600, **fields)
    return BenchOptions(settings, workload=workload_for(spec, settings), driver=driver,
                        arrival_seed=arrival_seed, api_key=api_key)


# --- the real rows ---------------------------------------------------------------------------

def test_a_real_059_row_becomes_a_level_with_what_it_holds_and_nothing_else() -> None:
    row = parse_row(ROW_059.read_bytes())
    level = level_from_row(row, concurrency=2, requests=8, notes=["driver note"])
    assert (level.completed, level.failed, level.output_tokens) == (
        8,
        0,
        row["total_output_tokens"],
    )
    assert level.ttft_ms.mean == round(row["mean_ttft_ms"], 4)
    assert level.ttft_ms.p50 == round(row["median_ttft_ms"], 4)
    assert level.ttft_ms.p99 == round(row["p99_ttft_ms"], 4)
    assert level.itl_ms.p95 == round(row["p95_itl_ms"], 4)
    assert level.e2e_ms.p90 == round(row["p90_e2e_latency_ms"], 4)
    assert level.tpot_ms.std == round(row["std_tpot_ms"], 4)
    # 0.5.9 writes no p90/p95 of TTFT and TPOT and no max at all: empty, and the notes say so.
    assert level.ttft_ms.p90 is None and level.ttft_ms.p95 is None and level.itl_ms.max is None
    assert level.notes[0] == "driver note"
    assert "p90_ttft_ms" in level.notes[1] and "max_itl_ms" in level.notes[1]
    assert "p95_itl_ms" not in level.notes[1]
    assert level.input_tokens == row["total_input_tokens"] and level.prompt_tokens_mean == 32.0
    assert level.input_tokens_per_s == round(row["input_throughput"], 3)
    assert level.requests_per_s == round(row["request_throughput"], 4)
    assert level.duration_s == round(row["duration"], 4)


def test_the_row_with_per_request_details_reads_the_same_way() -> None:
    details = FIXTURES / "sglang-0.5.9-random-details.jsonl"
    row = parse_row(details.read_bytes())
    level = level_from_row(row, 2, 8, [])
    assert level.completed == 8 and level.itl_ms.p99 == round(row["p99_itl_ms"], 4)


def test_a_0523_row_fills_the_percentiles_059_lacks() -> None:
    row = _row(p90_ttft_ms=58.0, p95_ttft_ms=59.0, p90_tpot_ms=20.01, p95_tpot_ms=20.02,
               p90_itl_ms=21.0, p95_e2e_latency_ms=358.0)
    level = level_from_row(row, 2, 8, [])
    assert (level.ttft_ms.p90, level.ttft_ms.p95, level.e2e_ms.p95) == (58.0, 59.0, 358.0)
    assert "p90_ttft_ms" not in " ".join(level.notes)


def test_zeros_of_empty_samples_are_not_taken_for_measurements() -> None:
    none_done = level_from_row(_row(completed=0), 2, 8, [])
    assert none_done.failed == 8 and none_done.ttft_ms.mean is None
    assert (
        none_done.errors == {"unreported": 8} and "does not say why" in none_done.error_examples[0]
    )
    one_chunk = level_from_row(_row(**{f"{s}_itl_ms": 0.0 for s in ("mean", "median", "std", "p95",
                                                                    "p99")}), 2, 8, [])
    assert one_chunk.itl_ms.mean is None and one_chunk.ttft_ms.mean is not None
    assert any("wrote 0 for an empty sample" in note for note in one_chunk.notes)


@pytest.mark.parametrize("data, said", [
    (ROW_059.read_bytes() * 2, "2 result lines"),
    (b"", "0 result lines"),
    (b"[1, 2]\n", "not a JSON object"),
    (b"\xff\xfe\n", "not UTF-8"),
    (json.dumps(_row(completed="8")).encode(), "'completed'"),
    (json.dumps(_row(completed=7.5)).encode(), "not a count"),
    (json.dumps(_row(mean_ttft_ms=-1.0)).encode(), "'mean_ttft_ms'"),
    (json.dumps(_row(duration=True)).encode(), "'duration'"),
    (json.dumps(_row(mean_itl_ms=float("nan"))).encode(), "'mean_itl_ms'"),
    (json.dumps(_row(max_concurrency=4)).encode(), "max_concurrency 4.0, not 2"),
    (json.dumps(_row(total_output_tokens=10 ** 400)).encode(), "'total_output_tokens'"),
    (json.dumps(_row(completed=9)).encode(), "more than the 8 asked for"),
    (json.dumps({k: v for k, v in _row().items() if k != "duration"}).encode(), "no 'duration'"),
])
def test_malformed_rows_are_one_line_errors(data: bytes, said: str) -> None:
    with pytest.raises(Malformed) as caught:
        level_from_row(parse_row(data), 2, 8, [])
    assert said in str(caught.value) and "\n" not in str(caught.value)


# --- what bench_serving is asked ---------------------------------------------------------------

def _argv(options: BenchOptions, concurrency: int = 2) -> list[str]:
    return bench_argv(options, concurrency, served="glm-5", tokenizer=TOKENIZER,
                      base_url="http://127.0.0.1:30000", output_file="/tmp/r.jsonl")


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_argv_of_a_closed_loop_random_level() -> None:
    argv = _argv(_options(), concurrency=4)
    assert argv[:3] == ["python3", "-m", "sglang.bench_serving"]
    expected = {"--backend": "sglang-oai", "--dataset-name": "random-ids", "--num-prompts": "8",
                "--max-concurrency": "4", "--request-rate": "inf", "--seed": "1",
                "--warmup-requests": "4", "--random-input-len": "32", "--random-output-len": "16",
                "--random-range-ratio": "1", "--served-model-name": "glm-5",
                "--tokenizer": TOKENIZER, "--model": TOKENIZER, "--output-file": "/tmp/r.jsonl",
                "--base-url": "http://127.0.0.1:30000"}
    assert {name: _flag(argv, name) for name in expected} == expected
    assert "--disable-ignore-eos" not in argv and "--disable-tqdm" in argv


def test_argv_of_poisson_chat_sharegpt_and_shared_prefix() -> None:
    poisson = _argv(_options(api="chat", ignore_eos=False, request_rate=2.5, arrival_seed=1))
    assert _flag(poisson, "--backend") == "sglang-oai-chat"
    assert _flag(poisson, "--request-rate") == "2.5" and "--disable-ignore-eos" in poisson
    sharegpt = _argv(
        _options(spec=WorkloadSpec(name="sharegpt", dataset_path=Path("/data/sg.json")))
    )
    assert _flag(sharegpt, "--dataset-name") == "sharegpt"
    assert _flag(sharegpt, "--dataset-path") == "/data/sg.json"
    gsp = WorkloadSpec(name="generated-shared-prefix", input_len=64, output_len=16, groups=3,
                       prompts_per_group=5, prefix_len=256)
    shared = _argv(_options(spec=gsp, requests_per_level=None))
    assert {n: _flag(shared, n) for n in ("--gsp-num-groups", "--gsp-prompts-per-group",
                                          "--gsp-system-prompt-len", "--gsp-question-len",
                                          "--gsp-output-len", "--num-prompts")} == {
        "--gsp-num-groups": "3", "--gsp-prompts-per-group": "5", "--gsp-system-prompt-len": "256",
        "--gsp-question-len": "64", "--gsp-output-len": "16", "--num-prompts": "15"}


@pytest.mark.parametrize("spec, requests, duration, said", [
    (RANDOM, None, 30.0, "--duration"),
    (WorkloadSpec(name="words"), None, None, "--dataset-name words"),
    (WorkloadSpec(name="random", tokenizer=Path("/host/tok")), None, None, "--tokenizer"),
    (WorkloadSpec(name="sharegpt"), None, None, "needs --dataset-path"),
    (WorkloadSpec(name="generated-shared-prefix", groups=2, prompts_per_group=2), 5, None,
     "--requests 5"),
])
def test_what_bench_serving_cannot_express_is_refused_up_front(
    spec: WorkloadSpec, requests: int | None, duration: float | None, said: str
) -> None:
    with pytest.raises(UsageError) as caught:
        workload_for(spec, BenchSettings(requests_per_level=requests, duration_s=duration))
    assert said in caught.value.message and "\n" not in caught.value.message


# --- a sweep through the engine's exec ----------------------------------------------------------

class BenchServingInContainer:
    """FakeEngine's exec answered as the container would: bench_serving writes a real row for
    the level's concurrency to its --output-file; `cat` and `rm` act on those files."""

    def __init__(self, engine: FakeEngine) -> None:
        self.files: dict[str, bytes] = {}
        self.bench_result = ExecResult(exit_code=0, output=b"Serving Benchmark Result ...\n")
        engine.exec_handler = self.handle

    def handle(self, container_id: str, command: list[str], env: dict[str, str]) -> ExecResult:
        if command[0] == "timeout":
            if self.bench_result.exit_code == 0:
                level = int(_flag(command, "--max-concurrency"))
                self.files[_flag(command, "--output-file")] = json.dumps(
                    _row(max_concurrency=level)).encode() + b"\n"
            return self.bench_result
        if command[0] == "cat":
            return ExecResult(exit_code=0, output=self.files[command[1]])
        if command[:2] == ["rm", "-f"]:
            self.files.pop(command[2], None)
        return ExecResult(exit_code=0, output=b"")


def _server(engine: FakeEngine, name: str, host_port: int) -> str:
    engine.add_container(name, {MANAGED: TRUE, ROLE: ROLE_SERVER, PROFILE: "sim",
                                BASE_URL: f"http://127.0.0.1:{host_port}"},
                         ports=[PortBinding(container_port=30000, host_port=host_port)])
    return f"http://127.0.0.1:{host_port}"


def _client_factory(base_url: str, api_key: str | None, *, max_connections: int,
                    timeout_s: float) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "glm-5"}]})
        if request.url.path == "/model_info":
            return httpx.Response(200, json={"model_path": TOKENIZER, "tokenizer_path": TOKENIZER})
        return httpx.Response(404)

    return httpx.AsyncClient(base_url=base_url, transport=httpx.MockTransport(answer))


@pytest.fixture()
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine()
    monkeypatch.setattr(dockerpy, "connect", lambda *args, **kwargs: fake)
    return fake


def _bench(targets: list[Target], **fields: Any) -> Any:
    options = _options(driver=SglangBench(Root().serving_container), **fields)
    return run_bench(targets, options, client_factory=_client_factory,  # type: ignore[arg-type]
                     progress=lambda *args: None)


def test_a_sweep_runs_bench_serving_in_each_targets_container_into_one_ab_report(
    engine: FakeEngine, tmp_path: Path
) -> None:
    container = BenchServingInContainer(engine)
    urls = [_server(engine, "opsctl-a", 30001), _server(engine, "opsctl-b", 30002)]
    report = _bench([Target(label="a", base_url=urls[0]), Target(label="b", base_url=urls[1])],
                    concurrency=(2, 4))
    assert report.passed and report.config.driver == "sglang-bench"
    assert "sglang.bench_serving (backend sglang-oai, dataset random-ids)" in str(
        report.config.workload_note)
    assert [[lv.concurrency for lv in v.levels] for v in report.variants] == [[2, 4], [2, 4]]
    assert report.variants[1].levels[1].ttft_ms.mean == round(_row()["mean_ttft_ms"], 4)
    runs = [(cid, command, env) for cid, command, env, _ in engine.execs if command[0] == "timeout"]
    assert [engine.containers[cid].name for cid, _, _ in runs] == ["opsctl-a"] * 2 + [
        "opsctl-b"
    ] * 2
    for _, command, env in runs:
        assert env == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        assert _flag(command, "--base-url") == "http://127.0.0.1:30000"  # inside the container
    assert container.files == {}  # every result file read back and removed
    written = write_report_files(report, tmp_path)
    table = (tmp_path / "bench.md").read_text()
    assert "b (Δ vs a)" in table and "sglang.bench_serving" in table
    rows = [
        json.loads(line) for line in (tmp_path / "bench_serving.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 4 and len(written) == 4  # json, md, jsonl, csv
    assert {row["backend"] for row in rows} == {"sglang-oai"}  # what measured them, not opsctl


def test_the_saturation_stop_ends_a_bench_serving_sweep_too(engine: FakeEngine) -> None:
    """Each level's row: the same output throughput, E2E p50 growing with the concurrency."""
    container = BenchServingInContainer(engine)
    e2e = _row()["median_e2e_latency_ms"]

    def handle(container_id: str, command: list[str], env: dict[str, str]) -> ExecResult:
        if command[0] == "timeout":
            level = int(_flag(command, "--max-concurrency"))
            container.files[_flag(command, "--output-file")] = json.dumps(_row(
                max_concurrency=level, median_e2e_latency_ms=e2e * level)).encode() + b"\n"
            return container.bench_result
        return container.handle(container_id, command, env)

    engine.exec_handler = handle
    report = _bench([Target(label="a", base_url=_server(engine, "opsctl-a", 30001))],
                    concurrency=(2, 4, 8), saturation_gain=0.5)
    levels = report.variants[0].levels
    assert [lv.concurrency for lv in levels] == [2, 4] and levels[0].sweep_end is None
    assert (levels[1].sweep_end or "").startswith("saturated: output throughput +0.0% over "
                                                  "concurrency 2 while E2E p50 rose +100.0%")
    assert report.passed  # a planned end


def test_a_failing_bench_serving_fails_its_level_with_the_redacted_tail(engine: FakeEngine) -> None:
    container = BenchServingInContainer(engine)
    container.bench_result = ExecResult(exit_code=1, output=b"Traceback (most recent call last):\n"
                                        b"ValueError: Warmup failed, key sk-secret-key-1234\n")
    url = _server(engine, "opsctl-a", 30001)
    report = _bench([Target(label="a", base_url=url)], concurrency=(2, 4),
                    api_key="sk-secret-key-1234")
    variant = report.variants[0]
    assert len(variant.levels) == 1 and variant.stopped
    aborted = str(variant.levels[0].aborted)
    assert "exited 1" in aborted and "Warmup failed" in aborted and "sk-secret" not in aborted
    run_env = next(env for _, command, env, _ in engine.execs if command[0] == "timeout")
    assert run_env["OPENAI_API_KEY"] == "sk-secret-key-1234"  # to bench_serving, never the report
    error = verdict_error(report, Path("out"))
    assert error is not None and error.exit_code == EXIT_SMOKE


def test_a_hung_run_and_an_oversized_row_fail_the_level(engine: FakeEngine) -> None:
    container = BenchServingInContainer(engine)
    container.bench_result = ExecResult(exit_code=None, output=b"", timed_out=True)
    url = _server(engine, "opsctl-a", 30001)
    hung = _bench([Target(label="a", base_url=url)])
    assert "ran past the sweep's deadline" in str(hung.variants[0].levels[0].aborted)
    container.bench_result = ExecResult(exit_code=0, output=b"")
    engine.exec_handler = lambda cid, command, env: (
        ExecResult(exit_code=0, output=b"x" * (MAX_ROW_BYTES + 10)) if command[0] == "cat"
        else container.handle(cid, command, env))
    big = _bench([Target(label="a", base_url=url)])
    assert "larger than 1024 KiB" in str(big.variants[0].levels[0].aborted)


def test_a_target_without_an_opsctl_container_or_dataset_is_a_usage_error(
    engine: FakeEngine
) -> None:
    BenchServingInContainer(engine)
    nowhere = _bench([Target(label="x", base_url="http://127.0.0.1:30009")])
    assert nowhere.variants[0].error_exit_code == EXIT_USAGE
    assert "no running opsctl server container publishes" in str(nowhere.variants[0].error)
    url = _server(engine, "opsctl-a", 30001)
    engine.exec_handler = lambda cid, command, env: ExecResult(
        exit_code=1 if command[0] == "test" else 0, output=b"")
    sharegpt = WorkloadSpec(name="sharegpt", dataset_path=Path("/data/sg.json"))
    missing = _bench([Target(label="a", base_url=url)], spec=sharegpt)
    assert missing.variants[0].error_exit_code == EXIT_USAGE
    assert "not readable inside container opsctl-a" in str(missing.variants[0].error)


def test_the_container_is_the_opsctl_server_publishing_the_urls_port() -> None:
    engine = FakeEngine()
    _server(engine, "opsctl-a", 30001)
    engine.add_container("wild", {MANAGED: TRUE, ROLE: ROLE_SERVER},
                         ports=[PortBinding(container_port=8000, host_port=30002,
                                            host_address="0.0.0.0")])
    engine.add_container("down", {MANAGED: TRUE, ROLE: ROLE_SERVER}, status="exited",
                         ports=[PortBinding(container_port=30000, host_port=30003)])
    engine.add_container("not-ours", {ROLE: ROLE_SERVER},
                         ports=[PortBinding(container_port=30000, host_port=30004)])
    info, inner = server_for_url(engine, "http://localhost:30002/")
    assert (info.name, inner) == ("wild", "http://127.0.0.1:8000")
    assert server_for_url(engine, "http://127.0.0.1:30001")[0].name == "opsctl-a"
    for url in ("http://10.1.2.3:30001", "http://127.0.0.1:30003", "http://127.0.0.1:30004"):
        with pytest.raises(UsageError):
            server_for_url(engine, url)




def test_an_extra_request_body_reaches_bench_serving_and_opsctls_requests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--extra-request-body: bench_serving's own flag for the sglang-bench driver; merged into
    every body opsctl's client sends."""
    import asyncio

    from opsctl.traffic.bench import levels
    from opsctl.traffic.bench.workloads import build
    from opsctl.traffic.client import RequestResult

    body = {"chat_template_kwargs": {"enable_thinking": False}}
    argv = _argv(_options(extra_request_body=body))
    assert argv[argv.index("--extra-request-body") + 1] == json.dumps(body)
    assert "--extra-request-body" not in _argv(_options())
    sent: list[dict[str, Any]] = []

    async def capture(client: object, api: str, request: dict[str, Any],
                      **_: object) -> RequestResult:
        sent.append(request)
        return RequestResult(ok=True)

    monkeypatch.setattr(levels, "stream_generate", capture)
    spec = levels.RequestSpec("chat", "glm-5", 0.0, True, 10.0, build(WorkloadSpec()),
                              extra_body=body)
    asyncio.run(spec.send(None, 0))  # type: ignore[arg-type]
    assert sent[0]["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent[0]["model"] == "glm-5" and sent[0]["stream"] is True
