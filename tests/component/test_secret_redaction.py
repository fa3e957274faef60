"""A planted secret reaches no output: not stdout, not stderr, not any file the command wrote.

Issue 25, defect H3: `verify --base-url http://user:PASS@host` printed the URL with the password
and wrote it into --json; `metrics-proxy --upstream http://user:PASS@...` printed it at start-up;
a server echoing the Authorization header got `Basic <base64 user:pass>` written unmasked into
smoke's JSON and bench.json. Each test plants one password in URL userinfo and greps everything
the command produced for the password, for its Basic credential and for that credential's
base64 alone.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO_ROOT, SimServer
from hostile import HostileServer

USER, PASSWORD = "admin", "planted-Secret-pw-8675309"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
FAST = {"OPSCTL_SIM_TTFT_MS": "5", "OPSCTL_SIM_ITL_MS": "2", "OPSCTL_SIM_LOAD_SECONDS": "0",
        "OPSCTL_SIM_WARMUP_SECONDS": "0"}


def with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://{USER}:{PASSWORD}@")


def opsctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSCTL_API",
                                                                    "OPSCTL_PUSHGATEWAY"))}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "opsctl", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def assert_nowhere(folder: Path, *texts: str) -> None:
    """Neither the password nor its base64 credential is in `texts` or any file under `folder`."""
    written = {str(p): p.read_bytes().decode(errors="replace")
               for p in folder.rglob("*") if p.is_file()}
    assert written or texts
    for where, text in [*written.items(), *(("output", t) for t in texts)]:
        for secret in (PASSWORD, BASIC):
            assert secret not in text, f"{secret!r} in {where}"


@pytest.mark.parametrize("command", ["smoke", "bench"])
def test_an_echoed_basic_credential_is_masked(command: str, tmp_path: Path) -> None:
    with HostileServer("echo_auth") as server:
        url = with_userinfo(server.url)
        args = (["smoke", "--base-url", url, "--json", str(tmp_path / "smoke.json"),
                 "--request-timeout", "5"] if command == "smoke" else
                ["bench", "--base-url", url, "--concurrency", "1", "--requests", "2",
                 "--input-words", "4", "--output-tokens", "16", "--out", str(tmp_path / "b")])
        done = opsctl(*args, cwd=tmp_path)
        assert any("Basic" in r.headers.get("authorization", "") for r in server.requests)
    assert "Traceback" not in done.stderr, done.stderr
    assert_nowhere(tmp_path, done.stdout, done.stderr)
    written = "".join(p.read_text() for p in tmp_path.rglob("*.json"))
    assert "Basic ****" in written  # the echo is there, masked


@pytest.mark.parametrize("command", ["smoke", "bench", "verify"])
def test_a_bare_token_and_a_servers_own_secrets_are_masked(command: str, tmp_path: Path) -> None:
    """Issue 37, item 3: the Basic token echoed without its `Basic ` prefix, and the secrets of a
    foreign /server_info (its own key, a URL with userinfo), stored by bench and printed by
    verify."""
    with HostileServer("echo_token", sglang=True) as server:
        url = with_userinfo(server.url)
        args = {"smoke": ["smoke", "--base-url", url, "--json", str(tmp_path / "smoke.json"),
                          "--request-timeout", "5"],
                "bench": ["bench", "--base-url", url, "--concurrency", "1", "--requests", "2",
                          "--input-words", "4", "--output-tokens", "16", "--out",
                          str(tmp_path / "b")],
                "verify": ["verify", "--base-url", url, "--profile", "sim", "--json",
                           str(tmp_path / "verify.json")]}[command]
        done = opsctl(*args, cwd=tmp_path)
        assert any(r.path == "/server_info" for r in server.requests) or command == "smoke"
    assert "Traceback" not in done.stderr, done.stderr
    assert_nowhere(tmp_path, done.stdout, done.stderr)
    everything = done.stdout + done.stderr + "".join(
        p.read_bytes().decode(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert "server-own-key-31337" not in everything and "server-pw-31337" not in everything
    if command == "bench":
        assert '"server_info"' in everything  # stored, masked


def test_verify_masks_url_userinfo_in_output_and_json(tmp_path: Path,
                                                      sim_server: Callable[..., SimServer]) -> None:
    url = with_userinfo(sim_server(env=FAST).url)
    done = opsctl("verify", "--base-url", url, "--profile", "sim", "--json",
                  str(tmp_path / "verify.json"), cwd=tmp_path)
    assert done.returncode in (0, 4) and "Traceback" not in done.stderr, done.stderr
    assert (tmp_path / "verify.json").is_file()
    assert_nowhere(tmp_path, done.stdout, done.stderr)
    assert "****@127.0.0.1" in (tmp_path / "verify.json").read_text()


def test_metrics_proxy_masks_the_upstreams_userinfo_at_start_up(
        tmp_path: Path, sim_server: Callable[..., SimServer],
        free_port: Callable[[], int]) -> None:
    url = with_userinfo(sim_server(env=FAST, args=["--enable-metrics"]).url)
    log = tmp_path / "proxy.log"
    env = {**os.environ, "OPSCTL_TEST_METRICS_TOKEN": "proxy-test-token-0123456789abcdef",
           "COLUMNS": "200"}
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "opsctl", "metrics-proxy", "--token-env",
             "OPSCTL_TEST_METRICS_TOKEN", "--upstream", url, "--port", str(free_port())],
            env=env, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 30
        while "serving" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(10)
    assert "****@127.0.0.1" in log.read_text()
    assert_nowhere(tmp_path)
