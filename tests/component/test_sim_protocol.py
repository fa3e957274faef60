"""The simulator answers as sglang does, and opsctl sends what sglang accepts: every body checked
against the pinned release's own pydantic protocol models (tests/sglangprotocol.py).

One simulator per release (OPSCTL_SIM_SGLANG_VERSION) and one protocol worker per release (the real
``srt/entrypoints/openai/protocol.py`` of that wheel, with the openai release it pins) serve the
whole module. Responses must validate strictly, define no field the model lacks, and equal what
the release itself serialises for the same content; requests opsctl's client puts on the wire
must validate as FastAPI validates them and define no field sglang would drop.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPO_ROOT
from sglangprotocol import SglangProtocol, check_record, sse_payloads
from sglangprotocol_record import record

from opsctl.config.evalconfig import resolve_path
from opsctl.config.profiles import load_profile
from opsctl.deploy import localsim
from opsctl.traffic import wire
from opsctl.traffic.client import endpoint, generate, make_client, request_body, stream_generate
from opsctl.traffic.evals.dataset import load_gsm8k
from opsctl.traffic.evals.gsm8k import Gsm8kPlan, run_gsm8k
from opsctl.traffic.evals.probes import ProbeAsk, run_long_context_probes
from opsctl.traffic.payload import Api

RELEASES = ("0.5.23",)
MODEL = "glm-5"
CONTEXT = 4096
FIXTURES = REPO_ROOT / "tests" / "fixtures"


@pytest.fixture(scope="module")
def protocols() -> Iterator[dict[str, SglangProtocol]]:
    with SglangProtocol("0.5.23") as new:
        yield {"0.5.23": new}


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, localsim.LocalSim]]:
    started: dict[str, localsim.LocalSim] = {}
    try:
        for release in RELEASES:
            log = tmp_path_factory.mktemp(f"sim-{release}") / "sim.log"
            started[release] = localsim.start(
                ["--model-path", "/models/GLM-5-NVFP4", "--served-model-name", MODEL,
                 "--context-length", str(CONTEXT)],
                {"OPSCTL_SIM_SGLANG_VERSION": release, "OPSCTL_SIM_TTFT_MS": "0",
                 "OPSCTL_SIM_ITL_MS": "0"}, log, ready_timeout_s=20.0)
        yield started
    finally:
        for sim in started.values():
            sim.stop(timeout_s=10.0)


def assert_sglang(proto: SglangProtocol, kind: str, path: str, body: Any) -> None:
    problems = proto.check(kind, path, body)
    assert problems == [], f"sglang {proto.version} {kind} {path}:\n  " + "\n  ".join(problems) \
        + f"\nbody: {json.dumps(body)[:600]}"


# --- the checker itself: it must see each kind of difference -------------------------------------

CHAT_RESPONSE = {
    "id": "x", "object": "chat.completion", "created": 1, "model": MODEL,
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi",
                                          "reasoning_content": None},
                 "logprobs": None, "finish_reason": "length", "matched_stop": None}],
    "usage": {"prompt_tokens": 3, "total_tokens": 4, "completion_tokens": 1,
              "prompt_tokens_details": None, "reasoning_tokens": 0,
              "completion_tokens_details": None},
    "metadata": {"weight_version": "default"},
}


def test_checker_accepts_sglang_0523s_own_chat_shape(protocols: dict[str, SglangProtocol]) -> None:
    assert protocols["0.5.23"].check("response", "/v1/chat/completions", CHAT_RESPONSE) == []


@pytest.mark.parametrize(("change", "expected"), [
    (lambda b: b.pop("usage"), "invalid .usage: Field required"),
    (lambda b: b.update(created="1"), "invalid .created: Input should be a valid integer"),
    (lambda b: b["choices"][0].update(finish_reason="eos"), "invalid .choices[0].finish_reason"),
    (lambda b: b["choices"][0].update(tokens=[1]), "undefined field .choices[0].tokens"),
    (lambda b: b["choices"][0]["message"].pop("reasoning_content"),
     "key .choices[0].message.reasoning_content missing: sglang sends null"),
    (lambda b: b["choices"][0]["message"].update(tool_calls=None),
     "key .choices[0].message.tool_calls is not in sglang's serialisation"),
    (lambda b: b["choices"][0].update(logprobs={"text_offset": [0], "token_logprobs": [1],
                                                "tokens": ["hi"], "top_logprobs": [None]}),
     "value at .choices[0].logprobs.token_logprobs[0]: sent 1, sglang serialises 1.0"),
])
def test_checker_reports_each_kind_of_difference(protocols: dict[str, SglangProtocol],
                                                 change: Any, expected: str) -> None:
    body = copy.deepcopy(CHAT_RESPONSE)
    change(body)
    problems = protocols["0.5.23"].check("response", "/v1/chat/completions", body)
    assert any(p.startswith(expected) for p in problems), problems


def test_checker_uses_the_releases_own_models(protocols: dict[str, SglangProtocol]) -> None:
    assert protocols["0.5.23"].imported["openai"] == "2.8.0"  # the wheel's pin


def test_checker_flags_requests_sglang_would_convert_or_drop(
        protocols: dict[str, SglangProtocol]) -> None:
    body = {"model": MODEL, "prompt": "x", "max_tokens": "4", "top_q": 1}
    for proto in protocols.values():
        problems = proto.check("request", "/v1/completions", body)
        assert any(p.startswith("coerced .max_tokens") for p in problems), problems
        assert any(p.startswith("undefined field .top_q") for p in problems), problems


# --- the simulator's responses -------------------------------------------------------------------

@pytest.mark.parametrize("release", RELEASES)
def test_model_list_and_card_are_sglangs(protocols: dict[str, SglangProtocol],
                                         sims: dict[str, localsim.LocalSim], release: str) -> None:
    sim, proto = sims[release], protocols[release]
    listing = httpx.get(sim.url + "/v1/models").json()
    assert [card["id"] for card in listing["data"]] == [MODEL]
    assert_sglang(proto, "response", "/v1/models", listing)
    assert_sglang(proto, "response", "/v1/models/{model}",
                  httpx.get(f"{sim.url}/v1/models/{MODEL}").json())


GENERATIONS = [
    pytest.param(api, ignore_eos, id=f"{api}-{'length' if ignore_eos else 'stop'}")
    for api in ("completions", "chat") for ignore_eos in (True, False)
]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("api", "ignore_eos"), GENERATIONS)
def test_completion_bodies_are_sglangs(protocols: dict[str, SglangProtocol],
                                       sims: dict[str, localsim.LocalSim], release: str,
                                       api: Api, ignore_eos: bool) -> None:
    path = endpoint(api)
    body = request_body(api, MODEL, "Tell me about the sea.",
                        max_tokens=8 if ignore_eos else 2048, stream=False, ignore_eos=ignore_eos)
    answer = httpx.post(sims[release].url + path, json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    reply = answer.json()
    assert reply["choices"][0]["finish_reason"] == ("length" if ignore_eos else "stop")
    assert_sglang(protocols[release], "response", path, reply)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("include_usage", [True, False], ids=["usage", "no-usage"])
@pytest.mark.parametrize(("api", "ignore_eos"), GENERATIONS)
def test_stream_chunks_are_sglangs(protocols: dict[str, SglangProtocol],
                                   sims: dict[str, localsim.LocalSim], release: str, api: Api,
                                   ignore_eos: bool, include_usage: bool) -> None:
    path = endpoint(api)
    body = request_body(api, MODEL, "Tell me about the sea.",
                        max_tokens=6 if ignore_eos else 2048, stream=True, ignore_eos=ignore_eos)
    if not include_usage:
        body.pop("stream_options")
    answer = httpx.post(sims[release].url + path, json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    chunks = sse_payloads(answer.text)
    assert chunks[-1] == "[DONE]"
    chunks = chunks[:-1]
    usage_chunks = [c for c in chunks if not c["choices"]]
    assert len(usage_chunks) == (1 if include_usage else 0)
    for chunk in chunks:
        assert_sglang(protocols[release], "chunk", path, chunk)


ERRORS = [
    pytest.param("/v1/chat/completions", {"model": MODEL, "messages": []}, id="chat-no-messages"),
    pytest.param("/v1/completions", {"model": MODEL, "prompt": ""}, id="completion-no-prompt"),
    pytest.param("/v1/completions", {"model": MODEL, "prompt": "x", "n": 2}, id="n-2"),
]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("path", "body"), ERRORS)
def test_error_bodies_are_sglangs(protocols: dict[str, SglangProtocol],
                                  sims: dict[str, localsim.LocalSim], release: str, path: str,
                                  body: dict[str, Any]) -> None:
    answer = httpx.post(sims[release].url + path, json=body, timeout=30)
    assert answer.status_code == 400
    assert_sglang(protocols[release], "error", path, answer.json())


CHAT_OK = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
REJECTED = [
    pytest.param("/v1/chat/completions", {"model": MODEL}, id="chat-messages-missing"),
    pytest.param("/v1/chat/completions", {"model": MODEL, "messages": "x"}, id="chat-messages-str"),
    pytest.param("/v1/chat/completions", {"model": MODEL, "messages": [1]}, id="chat-message-int"),
    pytest.param(
        "/v1/chat/completions", {"model": MODEL, "messages": []}, id="chat-messages-empty"
    ),
    pytest.param(
        "/v1/chat/completions", {**CHAT_OK, "max_tokens": 1.5}, id="chat-max-tokens-float"
    ),
    pytest.param("/v1/chat/completions", {**CHAT_OK, "temperature": "hot"}, id="chat-temperature"),
    pytest.param("/v1/completions", {"model": MODEL}, id="completion-prompt-missing"),
    pytest.param("/v1/completions", {"model": MODEL, "prompt": 5}, id="completion-prompt-int"),
    pytest.param("/v1/completions", {"model": MODEL, "prompt": ""}, id="completion-prompt-empty"),
    pytest.param(
        "/v1/completions",
        {"model": MODEL, "prompt": "x", "max_tokens": 0},
        id="completion-max-tokens-0",
    ),
    pytest.param("/v1/completions", [1, 2], id="completion-body-list"),
]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("path", "body"), REJECTED)
def test_rejections_name_the_stage_sglang_rejects_at(protocols: dict[str, SglangProtocol],
                                                     sims: dict[str, localsim.LocalSim],
                                                     release: str, path: str, body: Any) -> None:
    """A body the release's request model rejects is answered by http_server's validation
    handler (type "Bad Request"); one it accepts but the serving layer refuses, by
    create_error_response (type "BadRequestError"). The model decides which, not a list here."""
    verdict = protocols[release].check("request", path, body)
    by_model = any(p.startswith("invalid") for p in verdict)
    answer = httpx.post(sims[release].url + path, json=body, timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["type"] == ("Bad Request" if by_model else "BadRequestError"), verdict
    assert_sglang(protocols[release], "error", path, answer.json())


ROLES = ["user", "User", "system", "SYSTEM", "developer", "tool", "function", "latest_reminder",
         "root", "bogus", 5, None]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("role", ROLES)
def test_message_roles_are_taken_as_sglang_takes_them(protocols: dict[str, SglangProtocol],
                                                     sims: dict[str, localsim.LocalSim],
                                                     release: str, role: Any) -> None:
    body = {**CHAT_OK, "max_tokens": 2, "messages": [{"role": role, "content": "x"}]}
    verdict = protocols[release].check("request", "/v1/chat/completions", body)
    accepted = not any(p.startswith("invalid") for p in verdict)
    answer = httpx.post(sims[release].url + "/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == (200 if accepted else 400), (verdict, answer.text)
    if not accepted:
        assert answer.json()["type"] == "Bad Request"


@pytest.mark.parametrize("release", RELEASES)
def test_server_error_body_is_sglangs(protocols: dict[str, SglangProtocol],
                                      sims: dict[str, localsim.LocalSim], release: str) -> None:
    sim = sims[release]
    httpx.post(sim.url + "/_sim/config", json={"fault": "error_rate", "error_rate": 1.0})
    try:
        answer = httpx.post(sim.url + "/v1/completions", json={"model": MODEL, "prompt": "x"})
    finally:
        httpx.post(sim.url + "/_sim/config", json={"fault": "none", "error_rate": 0.0})
    assert answer.status_code == 500
    assert_sglang(protocols[release], "error", "/v1/completions", answer.json())


# --- what opsctl's client sends -------------------------------------------------------------------


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Every generation body opsctl's wire sends, as the JSON it writes (json.dumps(body))."""
    record: list[tuple[str, Any]] = []
    post, stream = wire.Wire.post, wire.Wire.stream

    async def recording_post(self: wire.Wire, path: str, body: dict[str, Any],
                             clocked: Any) -> tuple[int, bytes]:
        record.append((path, json.loads(json.dumps(body))))
        return await post(self, path, body, clocked)

    async def recording_stream(self: wire.Wire, path: str, body: dict[str, Any],
                               sink: Any) -> None:
        record.append((path, json.loads(json.dumps(body))))
        await stream(self, path, body, sink)

    monkeypatch.setattr(wire.Wire, "post", recording_post)
    monkeypatch.setattr(wire.Wire, "stream", recording_stream)
    return record


async def _opsctl_traffic(url: str, release: str) -> None:
    """The generation requests smoke, bench and the evals send, through opsctl's own client."""
    profile = load_profile("sim")
    gsm8k = profile.eval.gsm8k
    assert gsm8k is not None and gsm8k.shots_from is not None and gsm8k.shots_sha256 is not None
    async with make_client(url, None) as client:
        apis: tuple[Api, ...] = ("completions", "chat")
        for api in apis:
            for ignore_eos in (False, True):
                body = request_body(api, MODEL, "hello", max_tokens=4,
                                    stream=True, ignore_eos=ignore_eos)
                assert (await stream_generate(client, api, body, timeout_s=30)).ok
                body = request_body(api, MODEL, "hello", max_tokens=4,
                                    stream=False, ignore_eos=ignore_eos)
                assert (await generate(client, api, body, timeout_s=30)).ok
            plan = Gsm8kPlan(
                dataset=load_gsm8k(resolve_path(gsm8k.dataset), gsm8k.sha256),
                shots_from=load_gsm8k(resolve_path(gsm8k.shots_from), gsm8k.shots_sha256),
                threshold=0.0, questions=2, shots=2)
            await run_gsm8k(client, plan, model=MODEL, api=api, request_timeout_s=30,
                            overall_timeout_s=60)
            await run_long_context_probes(client, ProbeAsk(model=MODEL, api=api), sizes=[256],
                                          prefix_pair_tokens=256)


@pytest.mark.parametrize("release", RELEASES)
def test_opsctl_requests_are_what_sglang_accepts(protocols: dict[str, SglangProtocol],
                                                 sims: dict[str, localsim.LocalSim],
                                                 sent: list[tuple[str, Any]], release: str) -> None:
    asyncio.run(_opsctl_traffic(sims[release].url, release))
    kinds = {(path, body["stream"], "stop" in body, body.get("ignore_eos", False))
             for path, body in sent}
    assert len(kinds) >= 8, kinds  # both APIs, streamed or not, with stop strings, ignore_eos
    for path, body in sent:
        assert_sglang(protocols[release], "request", path, body)


# --- recorded answers of a real sglang server -----------------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_the_recorder_and_record_checks_pass_on_the_simulator(
        protocols: dict[str, SglangProtocol], sims: dict[str, localsim.LocalSim], release: str,
        tmp_path: Path) -> None:
    """The records tests/sglangprotocol_record.py writes (the tool to run next to a real server)
    go through the checks below; the simulator's pass them."""
    written = record(sims[release].url, MODEL, tmp_path)
    assert {json.loads(p.read_text())["kind"] for p in written} == {
        "response", "stream", "error", "info"}
    for path in written:
        assert check_record(protocols[release], json.loads(path.read_text())) == [], path.name


# The raw answers bench/run_sglang_gpu.sh saved from a real sglang server (their README says which
# request each is): (kind, endpoint) for the checks above; /model_info and /server_info have no
# model in protocol.py, so they are compared with the simulator's keys instead (below).
REAL_ANSWERS = {
    "v1_models.json": ("response", "/v1/models"),
    "completions_stream.sse": ("stream", "/v1/completions"),
    "chat_completions_stream.sse": ("stream", "/v1/chat/completions"),
}


def _recorded() -> list[Any]:
    """Each real answer under tests/fixtures/real-sglang-<version>/ as a record for check_record:
    the raw files the device run saved, and any *.record.json the recorder wrote."""
    found = []
    for folder in sorted(FIXTURES.glob("real-sglang-*")):
        for name, (kind, path) in REAL_ANSWERS.items():
            if (folder / name).is_file():
                found.append(pytest.param(folder / name, kind, path, id=f"{folder.name}/{name}"))
        found += [pytest.param(p, None, None, id=f"{folder.name}/{p.name}")
                  for p in sorted(folder.glob("*.record.json"))]
    return found


@pytest.mark.parametrize(("recorded", "kind", "path"), _recorded())
def test_recorded_real_answers_pass_the_same_checks(recorded: Path, kind: str | None,
                                                    path: str | None) -> None:
    version = recorded.parent.name.removeprefix("real-sglang-")
    text = recorded.read_text()
    answer = json.loads(text) if kind is None else {
        "kind": kind, "endpoint": path, "body": text if kind == "stream" else json.loads(text)}
    with SglangProtocol(version) as proto:
        assert check_record(proto, answer) == []


def test_the_real_answers_are_recorded() -> None:
    # The device run left real answers here; were they lost, the checks above would pass vacuously.
    assert len(_recorded()) >= len(REAL_ANSWERS)
