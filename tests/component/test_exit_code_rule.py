"""One exit-code rule for smoke, bench and verify against the same broken server (issue 25).

The rule (docs/smoke-and-bench.md, "Exit codes"): a server that is not serving - nothing
listens, or its first contact (`/v1/models` for smoke and bench, `/server_info` for verify)
gives no whole answer, an error status, a bad body or an empty model list - is exit 4 in every
command; once it listed its model, a failed generation request (closed, cut off, timed out,
malformed) or a failed check is exit 5. Verify sends no generation: its every failure is 4.
Before this rule smoke exited 5 where bench and verify exited 4 for the first class.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from hostile import HostileServer
from test_smoke_bench_failures import bench, one_line_verdict, opsctl, smoke

from opsctl.core.errors import EXIT_LAUNCH, EXIT_SMOKE

NOT_SERVING = ("close_models", "endless_models", "html_502", "auth", "empty_models")
FAILED_GENERATION = ("close", "cut_unclean", "malformed")


def verify(url: str) -> int:
    done = opsctl("verify", "--profile", "sim", "--base-url", url, "--timeout", "5")
    one_line_verdict(done)
    return done.returncode


@pytest.mark.parametrize("mode", NOT_SERVING)
def test_a_server_that_is_not_serving_is_exit_4_in_smoke_bench_and_verify(
        mode: str, tmp_path: Path) -> None:
    codes = {}
    with HostileServer(mode, max_seconds=20) as server:
        for name, run in (("smoke", lambda: smoke(server.url, tmp_path)),
                          ("bench", lambda: bench(server.url, tmp_path))):
            done = run()
            one_line_verdict(done)
            codes[name] = done.returncode
        codes["verify"] = verify(server.url)
    assert codes == dict.fromkeys(("smoke", "bench", "verify"), EXIT_LAUNCH), codes


def test_nothing_listening_is_exit_4_in_smoke_bench_and_verify(tmp_path: Path) -> None:
    # Bound and held, never listening: connections are refused, and no other process (a
    # parallel test worker) can take the port meanwhile.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        codes = {"smoke": smoke(url, tmp_path).returncode,
                 "bench": bench(url, tmp_path).returncode, "verify": verify(url)}
    assert codes == dict.fromkeys(("smoke", "bench", "verify"), EXIT_LAUNCH), codes


@pytest.mark.parametrize("mode", FAILED_GENERATION)
def test_a_failed_generation_is_exit_5_in_smoke_and_bench(mode: str, tmp_path: Path) -> None:
    with HostileServer(mode, max_seconds=20) as server:
        codes = {"smoke": smoke(server.url, tmp_path).returncode,
                 "bench": bench(server.url, tmp_path).returncode}
    assert codes == {"smoke": EXIT_SMOKE, "bench": EXIT_SMOKE}, codes
