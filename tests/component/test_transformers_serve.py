"""smoke and bench against a real OpenAI-compatible server that is not sglang: `transformers serve`.

Hugging Face's server (installed from PyPI by scripts/setup.sh) streams without `data: [DONE]`
and has no /health_generate, /model_info or sglang metrics. The model is built by
tests/tinymodel.py: a one-layer Llama with random weights and a word-level tokenizer made with the
`tokenizers` library, saved to a temporary directory and served offline on loopback, so nothing is
downloaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import OpsctlRunner
from tinymodel import build_tiny_model

START_TIMEOUT_S = 120.0


def _have_transformers_serve() -> bool:
    try:
        import fastapi  # noqa: F401
        import transformers  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return False
    return True


if not _have_transformers_serve():
    if os.environ.get("CI"):
        raise RuntimeError("CI: transformers[serving] is missing; scripts/setup.sh installs it")
    pytest.skip("transformers[serving] not installed (scripts/setup.sh installs it)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def hf_server(tmp_path_factory: pytest.TempPathFactory,
              free_port: Callable[[], int]) -> Iterator[str]:
    """`transformers serve MODEL_DIR` on loopback; its base URL once /v1/models answers."""
    root = tmp_path_factory.mktemp("hf")
    model = build_tiny_model(root / "model")
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(root / "hf-home")}
    log = (root / "serve.log").open("wb")
    cli = Path(sys.executable).with_name("transformers")
    process = subprocess.Popen([str(cli), "serve", str(model), "--host", "127.0.0.1",
                                "--port", str(port), "--device", "cpu"],
                               stdout=log, stderr=subprocess.STDOUT, env=env,
                               stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"transformers serve exited: {(root / 'serve.log').read_text()}")
            try:
                if httpx.get(f"{url}/v1/models", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"transformers serve not up in {START_TIMEOUT_S:g}s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
        log.close()


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_smoke_passes(hf_server: str, opsctl: OpsctlRunner, tmp_path: Path, api: str) -> None:
    path = tmp_path / "smoke.json"
    result = opsctl("smoke", "--base-url", hf_server, "--api", api, "--json", str(path),
                    timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(path.read_text())
    checks = {c["name"]: c["status"] for c in report["checks"]}
    assert checks["streaming"] == "pass" and checks["generations"] == "pass"
    assert checks["readiness"] == "skip"  # no /health_generate: not sglang


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_bench_passes(hf_server: str, opsctl: OpsctlRunner, tmp_path: Path, api: str) -> None:
    """transformers serve refuses `ignore_eos` (HTTP 422): --no-ignore-eos leaves it out; the
    tiny model never emits its end token, so answers still run to --output-tokens."""
    out = tmp_path / "bench"
    result = opsctl("bench", "--base-url", f"hf={hf_server}", "--api", api, "--concurrency",
                    "1,2", "--requests", "4", "--input-words", "8", "--output-tokens", "8",
                    "--no-ignore-eos", "--request-rate", "20", "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "bench.json").read_text())
    levels = report["variants"][0]["levels"]
    assert [lv["completed"] for lv in levels] == [4, 4]
    for level in levels:
        assert level["output_tokens"] == 4 * 8 and level["token_count_source"] == "usage"
        assert level["itl_ms"]["p95"] is not None and level["tpot_ms"]["max"] is not None
    assert (out / "bench_serving.jsonl").read_text().count("\n") == 2


def test_bench_with_ignore_eos_names_the_refusal(hf_server: str, opsctl: OpsctlRunner,
                                                 tmp_path: Path) -> None:
    result = opsctl("bench", "--base-url", f"hf={hf_server}", "--concurrency", "1",
                    "--requests", "1", "--output-tokens", "4", "--out", str(tmp_path), timeout=300)
    assert result.returncode == 5
    level = json.loads((tmp_path / "bench.json").read_text())["variants"][0]["levels"][0]
    assert "ignore_eos" in level["error_examples"][0]
