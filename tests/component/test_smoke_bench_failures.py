"""`opsctl smoke` and `opsctl bench` as a user runs them, against a hostile server on loopback.

No hostile answer may produce a traceback or an undocumented exit code (smoke: 0, 4, 5; bench:
0, 2, 4, 5); secrets never reach output or files; memory stays bounded against an endless
answer; Ctrl-C and the deadline leave a report of what was measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT
from hostile import HostileServer

from opsctl.core.errors import EXIT_LAUNCH

KEY = "sk-hostile-sentinel-key-4242"
SMALL = ("--concurrency", "1", "--requests", "2", "--input-words", "4", "--output-tokens", "16",
         "--request-timeout", "2")

# mode -> exit code (smoke, bench). Documented: smoke 0 pass, 4 not serving (no model list),
# 5 a check failed; bench 0 ok, 2 usage (no model to choose), 4 not serving, 5 failed requests.
EXPECTED: dict[str, tuple[int, int]] = {
    "ok": (0, 0),
    "no_done": (0, 0),
    "one_chunk": (0, 0),
    "multi_token": (0, 0),
    "inflated_usage": (5, 0),  # smoke's greedy check refuses the count; bench flags it
    "endless_models": (4, 4),
    "close_models": (4, 4),
    "empty_models": (4, 4),
    "html_502": (4, 4),
    "auth": (4, 4),  # no key given
    "endless_body": (5, 0),  # only non-streamed answers are endless: bench streams
    "endless_sse_line": (5, 5),
    "close": (5, 5),
    "malformed": (5, 5),
    "non_utf8": (5, 5),
    "invalid_json": (5, 5),
    "deep_json": (5, 5),
    "markup": (5, 5),
    "cut": (5, 5),
    "cut_unclean": (5, 5),
    "hang": (5, 5),
}


def opsctl_env(key: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPSCTL_API_KEY", "OPSCTL_PUSHGATEWAY")}
    env["COLUMNS"] = "200"
    if key:
        env["OPSCTL_API_KEY"] = key
    return env


def opsctl(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opsctl", *args], env=opsctl_env(key),
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def one_line_verdict(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    if done.returncode:
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, done.stderr


def smoke(url: str, tmp_path: Path, key: str | None = None) -> subprocess.CompletedProcess[str]:
    return opsctl("smoke", "--base-url", url, "--json", str(tmp_path / "smoke.json"),
                  "--request-timeout", "2", "--timeout", "30", key=key)


def bench(url: str, tmp_path: Path, *extra: str, key: str | None = None
          ) -> subprocess.CompletedProcess[str]:
    return opsctl("bench", "--base-url", url, *SMALL, "--out", str(tmp_path / "bench"), *extra,
                  key=key)


def bench_json(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "bench" / "bench.json").read_text())
    return data


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_smoke_exit_codes_against_each_hostile_mode(mode: str, tmp_path: Path) -> None:
    with HostileServer(mode, max_seconds=20) as server:
        done = smoke(server.url, tmp_path)
    assert done.returncode == EXPECTED[mode][0], done.stdout + done.stderr
    one_line_verdict(done)
    assert json.loads((tmp_path / "smoke.json").read_text())["kind"] == "smoke"


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_bench_exit_codes_against_each_hostile_mode(mode: str, tmp_path: Path) -> None:
    with HostileServer(mode, max_seconds=20) as server:
        done = bench(server.url, tmp_path)
    assert done.returncode == EXPECTED[mode][1], done.stdout + done.stderr
    one_line_verdict(done)
    report = bench_json(tmp_path)
    for level in report["variants"][0]["levels"]:
        assert level["output_tokens_per_s"] >= 0 and level["requests_per_s"] >= 0


@pytest.mark.parametrize("malformed", ["usage_tokens_negative", "choices_numbers", "usage_string"])
def test_bench_malformed_usage_and_choices_fail_the_requests(malformed: str,
                                                             tmp_path: Path) -> None:
    with HostileServer("malformed", malformed=malformed) as server:
        done = bench(server.url, tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    one_line_verdict(done)
    level = bench_json(tmp_path)["variants"][0]["levels"][0]
    assert level["errors"] == {"bad_response": 1} and level["output_tokens_per_s"] == 0.0


def test_bench_reports_itl_not_measurable_for_one_chunk_answers(tmp_path: Path) -> None:
    with HostileServer("one_chunk") as server:
        assert bench(server.url, tmp_path).returncode == 0
    level = bench_json(tmp_path)["variants"][0]["levels"][0]
    assert level["itl_note"].startswith("not measurable") and level["itl_ms"]["p50"] is None
    assert level["tpot_ms"]["p50"] is None and level["completed"] == 2


def test_bench_flags_inflated_usage_and_counts_chunks(tmp_path: Path) -> None:
    with HostileServer("inflated_usage", usage_tokens=1000) as server:
        assert bench(server.url, tmp_path).returncode == 0
    level = bench_json(tmp_path)["variants"][0]["levels"][0]
    assert level["usage_flagged"] == 3  # the warm-up request and the 2 measured ones
    assert "exceeds max_tokens=16" in level["usage_notes"][0]
    assert level["output_tokens"] == 6 and level["token_count_source"] == "chunks"


@pytest.mark.parametrize("command", ["smoke", "bench"])
def test_an_echoed_key_never_reaches_output_or_files(command: str, tmp_path: Path) -> None:
    with HostileServer("echo_key", key=KEY) as server:
        done = (smoke(server.url, tmp_path, key=KEY) if command == "smoke"
                else bench(server.url, tmp_path, key=KEY))
    assert done.returncode == 0, done.stdout + done.stderr
    written = "".join(p.read_text() for p in tmp_path.rglob("*") if p.suffix in (".json", ".md"))
    assert KEY not in done.stdout + done.stderr + written
    assert "model-of-****4242" in written  # the echo is there, masked


@pytest.mark.parametrize("command", ["smoke", "bench"])
def test_url_userinfo_is_redacted_everywhere(command: str, tmp_path: Path) -> None:
    with HostileServer("ok") as server:
        url = server.url.replace("http://", "http://admin:hunter2pw@")
        done = smoke(url, tmp_path) if command == "smoke" else bench(url, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    written = "".join(p.read_text() for p in tmp_path.rglob("*") if p.suffix in (".json", ".md"))
    assert "hunter2pw" not in done.stdout + done.stderr + written
    assert "****@127.0.0.1" in written


def test_an_unreachable_url_with_userinfo_is_redacted_in_the_error(tmp_path: Path) -> None:
    from hostile import free_port

    url = f"http://admin:hunter2pw@127.0.0.1:{free_port()}"
    for done in (smoke(url, tmp_path), bench(url, tmp_path)):
        assert done.returncode == 4 and "hunter2pw" not in done.stdout + done.stderr
        one_line_verdict(done)


def test_bench_refuses_a_url_it_cannot_use(tmp_path: Path) -> None:
    done = bench("ftp://example", tmp_path)
    assert done.returncode == 2 and "not an http(s) URL" in done.stderr
    one_line_verdict(done)


@pytest.mark.parametrize("command", ["smoke", "bench"])
def test_memory_stays_bounded_against_an_endless_model_list(command: str,
                                                            tmp_path: Path) -> None:
    """The CLI's peak RSS stays far below what the server offers (1 GiB), and it hangs up."""
    measure = ("import resource, subprocess, sys; "
               "done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
               "print(done.stdout, done.stderr)")
    with HostileServer("endless_models", max_seconds=90, max_bytes=1 << 30) as server:
        args = (["smoke", "--base-url", server.url, "--json", str(tmp_path / "s.json")]
                if command == "smoke" else ["bench", "--base-url", server.url, *SMALL,
                                            "--out", str(tmp_path / "b")])
        done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "opsctl",
                               *args], env=opsctl_env(), cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=80)
        sent = server.bytes_sent
    code, peak_kib = (int(x) for x in done.stdout.split("\n", 1)[0].split())
    assert code == EXIT_LAUNCH, done.stdout  # no usable model list: not serving, in every command
    assert "exceeds the 8 MiB cap" in done.stdout
    assert peak_kib < 400 * 1024  # the server would have sent 1 GiB
    assert sent < 64 << 20  # opsctl hung up after its cap


# Ctrl-C, and SIGTERM to the process alone (`kill`, systemd, CI): taken as Ctrl-C (issue 37).
STOPS = pytest.mark.parametrize(("signum", "code", "by"), [
    (signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")], ids=["sigint", "sigterm"])


def _interrupt(args: list[str], server: HostileServer, requests: int,
               tmp_path: Path, signum: int = signal.SIGINT) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen([sys.executable, "-m", "opsctl", *args], env=opsctl_env(),
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, stdin=subprocess.DEVNULL)
    try:
        assert server.wait_for(requests), "the request to interrupt never arrived"
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return subprocess.CompletedProcess(args, process.returncode, out, err)


@STOPS
def test_ctrl_c_during_bench_writes_a_partial_report_and_exits_130(
        tmp_path: Path, signum: int, code: int, by: str) -> None:
    # Warm-up and 2 measured requests answer; the 4th hangs until Ctrl-C.
    with HostileServer("ok", hang_after=3, max_seconds=60) as server:
        done = _interrupt(["bench", "--base-url", server.url, "--concurrency", "1",
                           "--requests", "5", "--out", str(tmp_path / "bench")], server, 4,
                          tmp_path, signum)
    assert done.returncode == code, done.stdout + done.stderr
    one_line_verdict(done)
    assert f"bench interrupted ({by})" in done.stderr
    report = bench_json(tmp_path)
    assert report["partial"] is True and report["partial_reason"] == f"interrupted ({by})"
    assert report["passed"] is False
    level = report["variants"][0]["levels"][0]
    assert (level["completed"], level["in_flight_cut"]) == (2, 1)
    assert level["aborted"] == f"interrupted ({by})"


@STOPS
def test_ctrl_c_during_smoke_writes_a_partial_report_and_exits_130(
        tmp_path: Path, signum: int, code: int, by: str) -> None:
    path = tmp_path / "smoke.json"
    with HostileServer("ok", hang_after=2, max_seconds=60) as server:
        done = _interrupt(["smoke", "--base-url", server.url, "--json", str(path)], server, 3,
                          tmp_path, signum)
    assert done.returncode == code, done.stdout + done.stderr
    one_line_verdict(done)
    report = json.loads(path.read_text())
    assert report["partial"] is True and report["partial_reason"] == f"interrupted ({by})"
    assert len(report["generations"]) == 2 and report["passed"] is False


def test_the_bench_deadline_ends_a_server_that_stops_answering(tmp_path: Path) -> None:
    with HostileServer("ok", hang_after=3, max_seconds=60) as server:
        done = opsctl("bench", "--base-url", server.url, "--concurrency", "1,2", "--requests",
                      "5", "--request-timeout", "600", "--deadline", "3", "--out",
                      str(tmp_path / "bench"))
    assert done.returncode == 5, done.stdout + done.stderr
    one_line_verdict(done)
    variant = bench_json(tmp_path)["variants"][0]
    assert len(variant["levels"]) == 1 and "deadline of 3s was reached" in variant["stopped"]
    level = variant["levels"][0]
    assert level["aborted"] == "the 3s deadline was reached"
    assert (level["completed"], level["in_flight_cut"]) == (2, 1)
    config = bench_json(tmp_path)["config"]
    assert config["sweep_deadline_s"] == config["settings"]["deadline_s"] == 3.0


def test_the_default_deadline_is_derived_and_capped(tmp_path: Path) -> None:
    from opsctl.traffic.bench.plan import BenchOptions
    from opsctl.traffic.settings import DEADLINE_CAP_S, BenchSettings

    assert BenchOptions(BenchSettings(concurrency=(1, 2), requests_per_level=4,
                                      request_timeout_s=10)).deadline() == (1 + 4 + 1 + 2) * 10
    assert BenchOptions().deadline() == DEADLINE_CAP_S == 3600.0
    assert BenchOptions(BenchSettings(deadline_s=5)).deadline() == 5


def test_a_slow_drip_that_never_finishes_is_ended_by_the_deadline(tmp_path: Path) -> None:
    with HostileServer("slow_drip", drip_s=0.1, max_seconds=60) as server:
        done = opsctl("bench", "--base-url", server.url, "--concurrency", "1", "--requests", "2",
                      "--request-timeout", "600", "--deadline", "2", "--out",
                      str(tmp_path / "bench"))
    assert done.returncode == 5, done.stdout + done.stderr
    one_line_verdict(done)
    level = bench_json(tmp_path)["variants"][0]["levels"][0]
    assert level["aborted"] == "the 2s deadline was reached"
    assert (level["warmup_requests"], level["in_flight_cut"]) == (0, 1)


@pytest.mark.parametrize("command", ["smoke", "bench"])
def test_generation_requests_never_follow_a_redirect_to_another_host(command: str,
                                                                     tmp_path: Path) -> None:
    """Issue 25: a 307 on /v1/completions sent smoke's and bench's generations (prompt and
    credentials) to the other host."""
    with HostileServer("ok") as elsewhere, \
            HostileServer("redirect", redirect_to=elsewhere.url.replace("127.0.0.1", "localhost")
                          ) as server:
        done = smoke(server.url, tmp_path) if command == "smoke" else bench(server.url, tmp_path)
        assert elsewhere.generation_requests() == 0, "a generation request followed the redirect"
    assert done.returncode == 5, done.stdout + done.stderr
    one_line_verdict(done)
