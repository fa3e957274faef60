"""The simulator, speaking sglang 0.5.15, against what a real sglang 0.5.15 server answered on the
H200 (tests/fixtures/real-sglang-0.5.15/, recorded by bench/run_sglang_gpu.sh): the same fields
with the same JSON types in /v1/models, /model_info and the SSE chunks, nothing in /server_info
the real one lacks, and only metric names the real server exports. Each difference this found
was fixed in the simulator (docs/architecture.md, "The simulator against sglang")."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REPO_ROOT
from sglangprotocol import sse_payloads

from opsctl.deploy import localsim

REAL = REPO_ROOT / "tests" / "fixtures" / "real-sglang-0.5.15"
ARGV = REPO_ROOT / "bench" / "results" / "sglang_h200" / "argv-baseline.txt"
MODEL = "tiny-mla"


def _sim_flags(argv: Path = ARGV) -> list[str]:
    """A real server's argv minus what the simulator binds itself (host, port) and the flags it
    does not model (pool size, grammar backend), each with its value."""
    tokens = shlex.split(argv.read_text())
    tokens = tokens[tokens.index("sglang.launch_server") + 1:]  # after `python3 -m`, env first
    flags, skip = [], False
    for token in tokens:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in ("--host", "--port", "--max-total-tokens", "--grammar-backend"):
            skip = "=" not in token
        else:
            flags.append(token)
    return flags


def _serve(argv: Path, model: Path) -> Iterator[httpx.Client]:
    """The simulator speaking 0.5.15, launched with a real server's argv on `model`'s folder."""
    flags = _sim_flags(argv)
    flags[flags.index("--model-path") + 1] = str(model)
    server = localsim.start(flags, {"OPSCTL_SIM_SGLANG_VERSION": "0.5.15",
                                    "OPSCTL_SIM_LOAD_SECONDS": "0",
                                    "OPSCTL_SIM_WARMUP_SECONDS": "0"})
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop(timeout_s=10)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    # The model folder holds a config.json of the real tiny model's architecture (what the real
    # /model_info reports), as the real server's folder did; the simulator reads it from there.
    model = tmp_path_factory.mktemp("tiny-mla")
    info = _real("model_info.json")
    (model / "config.json").write_text(json.dumps(
        {"architectures": info["architectures"], "model_type": info["model_type"]}))
    yield from _serve(ARGV, model)


def _shape(value: Any, prefix: str = "") -> dict[str, str]:
    """Every key path of a JSON value with its JSON type (a list by its first element)."""
    kind = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}[type(value)]
    out = {prefix: kind} if prefix else {}
    if isinstance(value, dict):
        for key, item in value.items():
            out.update(_shape(item, f"{prefix}.{key}" if prefix else key))
    elif isinstance(value, list) and value:
        out.update(_shape(value[0], f"{prefix}[]"))
    return out


def _real(name: str) -> Any:
    return json.loads((REAL / name).read_text())


def _chunks(text: str) -> list[Any]:
    return [payload for payload in sse_payloads(text) if isinstance(payload, dict)]


def _merged(chunks: list[Any]) -> dict[str, str]:
    shape: dict[str, str] = {}
    for chunk in chunks:
        for key, kind in _shape(chunk).items():
            if shape.get(key, "null") == "null":  # a key null in one chunk, typed in another
                shape[key] = kind
    return shape


@pytest.mark.parametrize(("path", "fixture"), [("/v1/models", "v1_models.json"),
                                               ("/model_info", "model_info.json")])
def test_the_same_fields_and_types(sim: httpx.Client, path: str, fixture: str) -> None:
    assert _shape(sim.get(path).json()) == _shape(_real(fixture))


def test_server_info_has_nothing_the_real_one_lacks(sim: httpx.Client) -> None:
    real, ours = _real("server_info.json"), sim.get("/server_info").json()
    assert set(_shape(ours)) - set(_shape(real)) == set()
    for key in ("version", "attention_backend", "kv_cache_dtype", "page_size", "tp_size",
                "cuda_graph_config", "max_total_num_tokens", "internal_states"):
        assert key in real and key in ours, key
        assert _shape(ours[key]).get("", None) == _shape(real[key]).get("", None), key


@pytest.mark.parametrize(("path", "fixture", "body"), [
    ("/v1/completions", "completions_stream.sse",
     {"prompt": "hi", "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", "chat_completions_stream.sse",
     {"messages": [{"role": "user", "content": "hi"}]}),
])
def test_stream_chunks_have_the_same_fields_and_types(sim: httpx.Client, path: str, fixture: str,
                                                      body: dict[str, Any]) -> None:
    request = {"model": MODEL, "max_tokens": 8, "stream": True, "temperature": 0, **body}
    with sim.stream("POST", path, json=request) as response:
        text = "".join(response.iter_text())
    real = _chunks((REAL / fixture).read_text())
    assert _merged(_chunks(text)) == _merged(real)
    assert text.rstrip().endswith("data: [DONE]") and (
        REAL / fixture
    ).read_text().rstrip().endswith("data: [DONE]")


def test_metric_names_are_ones_the_real_server_exports(sim: httpx.Client) -> None:
    stream = {"model": MODEL, "prompt": "hi", "max_tokens": 8, "stream": True}
    with sim.stream("POST", "/v1/completions", json=stream) as response:
        response.read()

    def names(text: str) -> set[str]:
        found = {m.group(1) for line in text.splitlines()
                 if line.startswith("sglang:") and (m := re.match(r"([a-z_:]+)", line))}
        return {re.sub(r"_(bucket|count|sum|total)$", "", name) for name in found}

    real = names((REAL / "metrics.after-bench.txt").read_text())
    ours = names(sim.get("/metrics").text)
    assert ours and ours - real == set()
    assert {"sglang:inter_token_latency_seconds", "sglang:time_to_first_token_seconds"} <= ours


def test_the_argv_is_the_recorded_real_one() -> None:
    assert Path(ARGV).is_file() and "--attention-backend flashinfer" in ARGV.read_text()


# --- the GLM-5-shaped DSA model on 0.5.15 (tests/fixtures/real-sglang-0.5.15/dsa/) ------------

DSA_ARGV = REPO_ROOT / "bench" / "results" / "sglang_h200" / "argv-glm5.txt"


@pytest.fixture(scope="module")
def dsa_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The simulator launched with the real DSA server's argv, on GLM-5's config (the real tiny
    model has GLM-5's architecture, index_topk and index_n_heads)."""
    model = tmp_path_factory.mktemp("tiny-glm5")
    (model / "config.json").write_text((REPO_ROOT / "tests" / "fixtures" / "glm5" / "config.json")
                                       .read_text())
    yield from _serve(DSA_ARGV, model)


def test_dsa_server_info_matches_the_real_dsa_server(dsa_sim: httpx.Client) -> None:
    real = _real("dsa/server_info.json")
    ours = dsa_sim.get("/server_info").json()
    assert set(_shape(ours)) - set(_shape(real)) == set()
    # What a real 0.5.15 resolved for a GLM-5-shaped model with FP8 KV (no backend flag given):
    # the DSA attention path with 64-token pages; the simulator must say the same.
    assert real["attention_backend"] == "dsa" and real["page_size"] == 64
    for key in ("attention_backend", "page_size", "kv_cache_dtype"):
        assert ours[key] == real[key], key


def test_dsa_model_info_and_models_have_the_real_fields(dsa_sim: httpx.Client) -> None:
    for path, fixture in (
        ("/v1/models", "dsa/v1_models.json"),
        ("/model_info", "dsa/model_info.json"),
    ):
        assert _shape(dsa_sim.get(path).json()) == _shape(_real(fixture)), path
    assert dsa_sim.get("/model_info").json()["architectures"] == _real("dsa/model_info.json")[
        "architectures"]
