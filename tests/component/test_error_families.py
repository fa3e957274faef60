"""Every foreign exception family becomes one line, a hint and its documented exit code.

The mapping (opsctl.core.failures) is checked family by family, then through the CLI as a user
runs it: a fake Docker engine that fails mid-call, answers 4xx, drops the connection or answers
garbage; a bad URL; Ctrl-C; an output folder that cannot take a file. Messages quoting the
engine or the user (`[/x]`, `[bold]`, Docker's "only [a-zA-Z0-9]...") print as written.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import docker.errors
import httpx
import pytest
import requests
import yaml
from stubhttp import CLOSE, StubServer, docker_routes, json_answer

from opsctl.core import errors
from opsctl.core.failures import as_opsctl_error

DOCUMENTED = {code.code for code in errors.EXIT_CODES}


def opsctl(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPSCTL_API")}
    return subprocess.run([sys.executable, "-m", "opsctl", *args], capture_output=True, text=True,
                          env={**clean, **env}, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line_error(run: subprocess.CompletedProcess[str]) -> str:
    """The error line; the run printed exactly one and no traceback."""
    assert "Traceback" not in run.stderr, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, run.stderr
    return lines[0]


def _request() -> httpx.Request:
    return httpx.Request("GET", "http://user:pw@127.0.0.1:9/v1/models")


def _api_error(status: int) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("engine said no", response=response, explanation="nope [/x]")


def _decoder_recursion() -> RecursionError:
    """A RecursionError as the JSON decoder raises it on deeply nested input (its traceback runs
    through json/); a bare one is opsctl's own recursion, a bug (below)."""
    try:
        json.loads("[" * 200_000 + "]" * 200_000)
    except RecursionError as exc:
        return exc
    raise AssertionError("json decoded 200,000 levels")


FAMILIES = [
    (PermissionError(errno.EACCES, "Permission denied", "/x/report.json"), 2, "Permission denied"),
    (IsADirectoryError(errno.EISDIR, "Is a directory", "/tmp"), 2, "Is a directory"),
    (OSError(errno.ENOSPC, "No space left on device", "/out/b.json"), 2, "No space left"),
    (NotADirectoryError(errno.ENOTDIR, "Not a directory", "/etc/passwd/x"), 2, "Not a directory"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), 4, "connection failed"),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 2, "0xff"),
    (UnicodeEncodeError("ascii", "\u2713", 0, 1, "no"), 2, "ascii"),
    (yaml.scanner.ScannerError(problem="found character '\\t'"), 2, "invalid YAML"),
    (_decoder_recursion(), 2, "nested too deeply"),
    (httpx.InvalidURL("Invalid port: ':x'"), 2, "not a usable URL"),
    (httpx.UnsupportedProtocol("unsupported 'ftp://'", request=_request()), 2, "not a usable URL"),
    (httpx.ConnectError("refused", request=_request()), 4, "the server failed"),
    (
        httpx.RemoteProtocolError("closed without answer", request=_request()),
        4,
        "RemoteProtocolError",
    ),
    (httpx.ReadTimeout("timed out"), 4, "ReadTimeout"),
    (_api_error(400), 4, "refused the request (400: nope [/x])"),
    (_api_error(500), 6, "failed mid-call (500: nope [/x])"),
    (
        docker.errors.DockerException("Error while fetching server API version"),
        6,
        "stopped answering",
    ),
    (requests.exceptions.ConnectionError("Connection aborted."), 6, "stopped answering"),
    (KeyboardInterrupt(), 130, "interrupted"),
]


@pytest.mark.parametrize(("exc", "code", "says"), FAMILIES,
                         ids=[type(f[0]).__name__ + str(f[1]) for f in FAMILIES])
def test_each_family_maps_to_its_documented_code(exc: BaseException, code: int, says: str) -> None:
    mapped = as_opsctl_error(exc)
    assert mapped is not None
    assert mapped.exit_code == code and code in DOCUMENTED
    assert says in mapped.message and "\n" not in mapped.message
    assert mapped.hint


@pytest.mark.parametrize("bug", [ValueError("x"), KeyError("k"), TypeError("t"), AssertionError(),
                                 RecursionError("maximum recursion depth exceeded"),
                                 OSError(errno.EBADF, "Bad file descriptor")])
def test_a_bug_stays_a_bug(bug: Exception) -> None:
    assert as_opsctl_error(bug) is None


# --- through the CLI -----------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "code", "says"), [
    (json_answer(500, '{"message": "boom [/x] [bold]"}'), 6, "(500: boom [/x] [bold])"),
    (json_answer(400, '{"message": "only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed"}'), 4,
     "(400: only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed)"),
    (CLOSE, 6, "stopped answering: ConnectionError"),
    ((200, "application/json", b"not json"), 6, "stopped answering"),
], ids=["500", "400", "closed", "garbage"])
def test_a_daemon_failing_mid_call_is_one_line(answer: object, code: int, says: str) -> None:
    with StubServer(docker_routes({r"/containers/json": answer})) as engine:  # type: ignore[dict-item]
        run = opsctl("status", DOCKER_HOST=engine.url.replace("http://", "tcp://"))
    assert run.returncode == code, run.stderr
    assert says in one_line_error(run)


def test_an_invalid_url_is_usage() -> None:
    run = opsctl("verify", "--base-url", "http://[::1")
    assert run.returncode == 2
    assert "URL" in one_line_error(run)


def test_an_output_file_that_is_a_directory_deep_inside_is_one_line(tmp_path: Path) -> None:
    """`monitor render` checks its folder first; a file it must write being a directory is
    found only while writing, and still reads as one line with the path."""
    (tmp_path / "prometheus" / "prometheus.yml").mkdir(parents=True)
    run = opsctl("monitor", "render", "--profile", "sim", "--out", str(tmp_path))
    assert run.returncode == 2, run.stderr
    assert "prometheus.yml" in one_line_error(run)


def test_ctrl_c_exits_130_with_one_line() -> None:
    """A server that accepts and never answers; Ctrl-C while opsctl waits on it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OPSCTL_API")}
        proc = subprocess.Popen([sys.executable, "-m", "opsctl", "verify", "--base-url", url,
                                 "--timeout", "60"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=clean)
        listener.settimeout(60)
        conn, _ = listener.accept()  # opsctl is now waiting for an answer
        with conn:
            time.sleep(0.2)
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
