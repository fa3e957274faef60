"""`opsctl smoke` against the sglang simulator over real HTTP on loopback.

Model-name cases, each injected fault, API key on and off, --compare-with, a server that only
speaks the OpenAI API, and the verdict's exit codes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from conftest import SimServer

from opsctl.config.sloconfig import Objective, Slo
from opsctl.core.errors import EXIT_LAUNCH, EXIT_SMOKE
from opsctl.traffic.settings import SmokeSettings
from opsctl.traffic.smoke import SmokeOptions, run_smoke
from opsctl.traffic.smoke_report import SmokeReport, verdict_error, write_report

StartSim = Callable[..., SimServer]

# Fast tokens keep the tests short; latencies are never asserted against these values.
FAST = {"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "2"}
SENTINEL_KEY = "sk-opsctl-sentinel-key-4242"


def statuses(report: SmokeReport) -> dict[str, str]:
    return {check.name: check.status for check in report.checks}


def detail(report: SmokeReport, name: str) -> str:
    check = report.check(name)
    assert check is not None, name
    return check.detail


def smoke(url: str, **overrides: object) -> SmokeReport:
    """run_smoke at `url`: settings' fields (SmokeSettings) and the plan's own overridden."""
    settings = {"request_timeout_s": 10.0, "overall_timeout_s": 60.0}
    settings.update({k: v for k, v in overrides.items() if k in SmokeSettings.model_fields})
    options = {k: v for k, v in overrides.items() if k not in SmokeSettings.model_fields}
    return run_smoke(SmokeOptions(base_url=url, settings=SmokeSettings(**settings),  # type: ignore[arg-type]
                                  **options))  # type: ignore[arg-type]


def sim(start: StartSim, *args: str, **env: str) -> str:
    # A hanging server never turns ready; wait only until it listens.
    wait = "listen" if env.get("OPSCTL_SIM_FAULT") == "hang" else "ready"
    return start(env={**FAST, **env}, args=["--enable-metrics", *args], wait=wait).url


# --- model names -------------------------------------------------------------------------


def test_alias_served_by_sglang_passes_every_check(sim_server: StartSim) -> None:
    url = sim(sim_server, "--served-model-name", "glm-5")
    report = smoke(url, profile_alias="glm-5")
    assert report.passed, report.checks
    assert statuses(report) == {
        "readiness": "pass", "model_listed": "pass", "model_info": "pass", "auth": "skip",
        "generations": "pass", "streaming": "pass", "metrics": "pass", "slo": "skip",
        "compare": "skip",
    }
    assert report.server_kind == "sglang"
    assert report.model is not None
    assert report.model.served_name == "glm-5"
    assert report.model.tokenizer_path == "/models/GLM-5-NVFP4"
    assert report.model.tokenizer_source == "/model_info tokenizer_path"
    assert [g.prompt_id for g in report.generations] == ["count", "capital", "code"]
    assert all(g.text and g.finish_reason == "length" for g in report.generations)
    assert report.stream is not None and report.stream.token_count_source == "usage"
    assert verdict_error(report, Path("r.json")) is None


def test_path_like_name_that_differs_from_the_alias_still_works(sim_server: StartSim) -> None:
    url = sim(sim_server)  # no --served-model-name: sglang serves the model path
    report = smoke(url, profile_alias="glm-5")
    assert report.passed, report.checks
    assert report.model is not None
    assert report.model.served_name == "/models/GLM-5-NVFP4"
    assert "'glm-5'" in detail(report, "model_listed")  # says the alias was not what is served


def test_several_models_listed_uses_the_profile_alias(sim_server: StartSim) -> None:
    url = sim(sim_server, "--served-model-name", "glm-5",
              OPSCTL_SIM_EXTRA_MODELS="glm-5-lora,other")
    report = smoke(url, profile_alias="glm-5")
    assert report.passed, report.checks
    assert report.model is not None
    assert report.model.served_name == "glm-5"
    assert report.model.served_name_source == "profile served_name, listed by /v1/models"


def test_several_models_without_a_match_fail_and_name_them(sim_server: StartSim) -> None:
    url = sim(sim_server, "--served-model-name", "glm-5", OPSCTL_SIM_EXTRA_MODELS="other")
    report = smoke(url, profile_alias="not-served")
    assert not report.passed
    assert statuses(report)["model_listed"] == "fail"
    assert "'glm-5', 'other'" in detail(report, "model_listed")
    assert "--model" in detail(report, "model_listed")
    assert statuses(report)["generations"] == "skip"
    error = verdict_error(report, Path("r.json"))
    assert error is not None and error.exit_code == EXIT_SMOKE
    # The user can then say which one: --model picks a listed name.
    assert smoke(url, profile_alias="not-served", model="other").passed


# --- faults ------------------------------------------------------------------------------


def test_server_errors_fail_generations(sim_server: StartSim) -> None:
    url = sim(sim_server, OPSCTL_SIM_FAULT="error_rate", OPSCTL_SIM_ERROR_RATE="1")
    report = smoke(url)
    assert statuses(report)["generations"] == "fail"
    assert "HTTP 500" in detail(report, "generations")
    assert statuses(report)["streaming"] == "fail"
    assert verdict_error(report, Path("r.json")).exit_code == EXIT_SMOKE  # type: ignore[union-attr]


def test_stream_cut_midway_fails_streaming_only(sim_server: StartSim) -> None:
    url = sim(sim_server, OPSCTL_SIM_FAULT="stream_cut", OPSCTL_SIM_STREAM_CUT_AFTER="3")
    report = smoke(url)
    assert statuses(report)["generations"] == "pass"  # non-streaming is not affected
    assert statuses(report)["streaming"] == "fail"
    assert report.stream is not None and report.stream.ok == 0
    assert all(e.startswith("stream_cut") for e in report.stream.errors)
    assert not report.passed


def test_slow_first_token_breaks_the_ttft_slo(sim_server: StartSim) -> None:
    # TTFT 100 ms x 20 = 2 s against a 1 s limit; the healthy server is 10x under it.
    slow = sim(sim_server, OPSCTL_SIM_FAULT="slow_first_token", OPSCTL_SIM_TTFT_MS="100")
    ttft_1s = Slo(ttft=Objective(quantile=0.5, threshold_ms=1000))
    report = smoke(slow, slo=ttft_1s)
    assert statuses(report)["streaming"] == "pass"
    assert statuses(report)["slo"] == "fail"
    assert "TTFT p50" in detail(report, "slo") and "> 1000 ms" in detail(report, "slo")
    observed = report.slo.ttft.observed_ms if report.slo.ttft else None
    assert observed is not None and observed > 1000.0

    healthy = sim(sim_server, OPSCTL_SIM_TTFT_MS="100")
    assert statuses(smoke(healthy, slo=ttft_1s))["slo"] == "pass"


def test_hang_past_the_request_timeout_fails_every_request(sim_server: StartSim) -> None:
    url = sim(sim_server, OPSCTL_SIM_FAULT="hang")
    report = smoke(url, request_timeout_s=0.5, stream_requests=1)
    assert report.reachable
    for name in ("generations", "streaming"):
        assert statuses(report)[name] == "fail"
    assert "within 0.5s" in detail(report, "generations")
    assert verdict_error(report, Path("r.json")).exit_code == EXIT_SMOKE  # type: ignore[union-attr]


def test_overall_timeout_bounds_the_run(sim_server: StartSim) -> None:
    url = sim(sim_server, OPSCTL_SIM_FAULT="hang")
    report = smoke(url, request_timeout_s=30.0, overall_timeout_s=1.0)
    assert not report.passed
    assert "overall timeout" in detail(report, "compare")
    assert report.duration_s < 30.0  # the 30 s request timeout never applied in full


def test_connection_refused_is_unreachable_exit_4(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = smoke(f"http://127.0.0.1:{port}")
    assert not report.reachable and not report.passed
    assert statuses(report)["readiness"] == "fail"
    assert statuses(report)["generations"] == "skip"
    error = verdict_error(report, tmp_path / "r.json")
    assert error is not None and error.exit_code == EXIT_LAUNCH


# --- API key -----------------------------------------------------------------------------


def test_api_key_on_is_used_enforced_and_masked(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server, "--api-key", SENTINEL_KEY)
    report = smoke(url, api_key=SENTINEL_KEY)
    assert report.passed, report.checks
    assert statuses(report)["auth"] == "pass"
    assert report.api_key == "****4242"
    path = tmp_path / "smoke.json"
    write_report(report, path)
    assert SENTINEL_KEY not in path.read_text()


def test_api_key_missing_fails_with_a_hint(sim_server: StartSim) -> None:
    url = sim(sim_server, "--api-key", SENTINEL_KEY)
    report = smoke(url)
    assert statuses(report)["model_listed"] == "fail"
    assert "OPSCTL_API_KEY" in detail(report, "model_listed")


def test_wrong_key_is_never_echoed(sim_server: StartSim) -> None:
    url = sim(sim_server, "--api-key", SENTINEL_KEY)
    wrong = "sk-wrong-key-value-1234"
    report = smoke(url, api_key=wrong)
    assert not report.passed
    assert wrong not in report.model_dump_json()


# --- --compare-with ----------------------------------------------------------------------


def test_compare_with_fails_on_corrupted_outputs(sim_server: StartSim, tmp_path: Path) -> None:
    reference = smoke(sim(sim_server), variant="baseline")
    assert reference.passed
    recorded = tmp_path / "baseline.json"
    write_report(reference, recorded)

    same = smoke(sim(sim_server), compare_with=recorded)
    assert statuses(same)["compare"] == "pass", detail(same, "compare")

    corrupt = smoke(sim(sim_server, OPSCTL_SIM_FAULT="corrupt"), compare_with=recorded)
    assert statuses(corrupt)["compare"] == "fail"
    assert "variant 'baseline'" in detail(corrupt, "compare")
    assert "in 3 of 3 prompts; first: request 0 (count)" in detail(corrupt, "compare")
    assert corrupt.divergence is not None and corrupt.divergence.unit == "characters"
    assert corrupt.divergence.request_id == "count"
    assert statuses(corrupt)["generations"] == "pass"  # corrupt text still looks healthy
    assert not corrupt.passed


# --- a server that only speaks the OpenAI API ---------------------------------------------


class _OpenAIOnly(BaseHTTPRequestHandler):
    """Forwards /v1/* to the simulator and answers 404 elsewhere: no sglang endpoints."""

    upstream = ""

    def _forward(self) -> None:
        if not self.path.startswith("/v1/"):
            body = b'{"detail":"Not Found"}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else None
        headers = {k: v for k in ("Authorization", "Content-Type") if (v := self.headers.get(k))}
        with httpx.Client(timeout=30) as client, client.stream(
            self.command, self.upstream + self.path, content=data, headers=headers
        ) as response:
            self.send_response(response.status_code)
            self.send_header("Content-Type", response.headers.get("content-type", "text/plain"))
            self.end_headers()  # HTTP/1.0: the body ends when the connection closes
            for chunk in response.iter_raw():
                self.wfile.write(chunk)
                self.wfile.flush()

    do_GET = _forward
    do_POST = _forward

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def openai_only(sim_server: StartSim) -> Iterator[str]:
    handler = type("Handler", (_OpenAIOnly,), {"upstream": sim(sim_server)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_openai_only_server_skips_sglang_checks(openai_only: str) -> None:
    report = smoke(openai_only, profile_alias="glm-5")
    assert report.passed, report.checks
    assert report.server_kind == "openai"
    assert statuses(report) == {
        "readiness": "skip", "model_listed": "pass", "model_info": "skip", "auth": "skip",
        "generations": "pass", "streaming": "pass", "metrics": "skip", "slo": "skip",
        "compare": "skip",
    }
    assert report.model is not None and report.model.tokenizer_path is None
    assert "not sglang" in report.model.tokenizer_source


# --- the report file ---------------------------------------------------------------------


def test_report_is_overwritten_not_appended(sim_server: StartSim, tmp_path: Path) -> None:
    url = sim(sim_server)
    path = tmp_path / "smoke.json"
    write_report(smoke(url), path)
    write_report(smoke(url), path)
    loaded = json.loads(path.read_text())  # one JSON document, not two concatenated
    assert loaded["kind"] == "smoke" and loaded["passed"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smoke.json"]


def test_chat_api_passes_and_compares_like_completions(sim_server: StartSim) -> None:
    url = sim(sim_server, "--served-model-name", "glm-5")
    report = smoke(url, api="chat")
    assert report.passed, report.checks
    assert report.api == "chat"
    assert all(g.text for g in report.generations)
