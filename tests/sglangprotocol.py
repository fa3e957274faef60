"""Check JSON bodies against a pinned sglang release's own OpenAI protocol models (pydantic).

``SglangProtocol(version)`` stages the real files once per release into the wheel cache
(``$OPSCTL_WHEEL_CACHE/opsctl-protocol/sglang-<version>-stage<N>/``, N the stage format):
from the sglang wheel ``srt/entrypoints/openai/protocol.py`` (+ ``sse_utils.py`` where the
release has it) and ``utils.py``; from PyPI the exact ``openai`` release the sglang wheel's
METADATA pins, msgspec (as ``opsctl.argspec.extract`` pins it) and distro (openai needs it; this
venv lacks it). A worker subprocess (``tests/sglangprotocol_worker.py``) imports them and
answers one body at a time:

    with SglangProtocol("0.5.23") as proto:
        proto.check("response", "/v1/chat/completions", body)   # -> list of problems, [] = same

Kinds: ``response`` (a non-streaming 200 body), ``chunk`` (one SSE ``data:`` payload, JSON
decoded; ``{"error": ...}`` is checked as a streamed ErrorResponse), ``error`` (an error body),
``request`` (what a client sends). A problem is one of: the model rejects the body (strict JSON
validation for responses: no coercion; lax for requests, as FastAPI validates them), a field the
model does not define (at any depth; also where the model keeps extras), or a difference from
what sglang itself serialises for the same content (responses only: the model re-serialised the
way that release's ``serving_*.py`` writes it). Any body, from the simulator or recorded from a
real server, goes through the same ``check``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from types import TracebackType
from typing import Any

from opsctl.argspec.extract import PROBE_DEPENDENCIES
from opsctl.core import wheels

WORKER = Path(__file__).with_name("sglangprotocol_worker.py")
PROTOCOL_DIR = "sglang/srt/entrypoints/openai"
SGLANG_MEMBERS = (f"{PROTOCOL_DIR}/protocol.py", f"{PROTOCOL_DIR}/sse_utils.py", "sglang/utils.py")
# openai's one dependency that this venv lacks (openai 2.6.1/2.8.0 METADATA: distro<2,>=1.7.0);
# the version pip resolved for that range on PyPI.
EXTRA_DEPENDENCIES = ("distro==1.9.0",)
STAGE_FORMAT = "1"
ANSWER_TIMEOUT_S = 120  # start-up (imports) or one answer


def _msgspec() -> str:
    (pin,) = [dep for dep in PROBE_DEPENDENCIES if dep.startswith("msgspec==")]
    return pin


def openai_pin(metadata: str) -> str:
    """The ``openai==X`` the sglang wheel requires (an exact pin, unconditionally)."""
    pins = re.findall(r"^Requires-Dist: openai==([^;,\s]+)\s*$", metadata, re.MULTILINE)
    if len(pins) != 1:
        raise RuntimeError(f"the sglang METADATA pins openai {pins!r}, expected one exact pin")
    return f"openai=={pins[0]}"


def _unpack(wheel: Path, dest: Path, members: tuple[str, ...] | None = None) -> None:
    """The whole wheel, or only `members` and the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        if members is not None:
            names = [n for n in names if n in members or n.endswith(".dist-info/METADATA")]
        archive.extractall(dest, names)


def stage(version: str, cache: Path | None = None) -> Path:
    """The staged files of one release (made once, atomically, inside the wheel cache)."""
    cache = cache or wheels.cache_dir()
    target = cache / "opsctl-protocol" / f"sglang-{version}-stage{STAGE_FORMAT}"
    if (target / "stage.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".sglang-{version}-", dir=target.parent))
    try:
        sglang = wheels.fetch("sglang", version, cache)
        _unpack(sglang, work / "src", SGLANG_MEMBERS)
        (metadata,) = (work / "src").glob("sglang-*.dist-info/METADATA")
        deps = [openai_pin(metadata.read_text()), _msgspec(), *EXTRA_DEPENDENCIES]
        dependencies: dict[str, str] = {}
        for requirement in deps:
            name, pinned = requirement.split("==")
            wheel = wheels.fetch(name, pinned, cache)
            _unpack(wheel, work / "deps")
            dependencies[name] = wheel.name
        recorded = {"format": STAGE_FORMAT, "sglang_wheel": sglang.name,
                    "dependencies": dependencies}
        (work / "stage.json").write_text(json.dumps(recorded, indent=1) + "\n")
        try:
            os.replace(work, target)
        except OSError:  # another process staged it first
            if not (target / "stage.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


class SglangProtocol:
    """One worker process holding one release's protocol models."""

    def __init__(self, version: str, cache: Path | None = None) -> None:
        self.version = version
        self.stage = stage(version, cache)
        self._proc: subprocess.Popen[str] | None = None
        self.imported: dict[str, Any] = {}

    def __enter__(self) -> SglangProtocol:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self._proc = subprocess.Popen(
            [sys.executable, "-B", str(WORKER), str(self.stage)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.imported = self._read()
        if not self.imported.get("ready"):
            raise RuntimeError(f"protocol worker did not start: {self.imported}")
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        self._proc = None

    def _read(self) -> dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        # A stuck worker is killed, so readline returns and the caller fails instead of hanging.
        watchdog = threading.Timer(ANSWER_TIMEOUT_S, proc.kill)
        watchdog.start()
        try:
            line = proc.stdout.readline()
        finally:
            watchdog.cancel()
        if not line:
            err = proc.stderr.read() if proc.stderr is not None else ""
            raise RuntimeError(f"protocol worker for sglang {self.version} died:\n{err[-4000:]}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def answer(self, kind: str, endpoint: str, body: Any) -> dict[str, Any]:
        """The worker's verdict: ``{"model": class name, "problems": [...]}``."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise RuntimeError("use SglangProtocol as a context manager")
        proc.stdin.write(json.dumps({"kind": kind, "endpoint": endpoint, "body": body}) + "\n")
        proc.stdin.flush()
        return self._read()

    def check(self, kind: str, endpoint: str, body: Any) -> list[str]:
        """[] when sglang's model takes the body and would serialise it the same."""
        problems: list[str] = self.answer(kind, endpoint, body)["problems"]
        return problems


def sse_payloads(text: str) -> list[Any]:
    """The ``data:`` payloads of an SSE body, JSON-decoded except ``[DONE]``."""
    out: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def check_record(proto: SglangProtocol, record: dict[str, Any]) -> list[str]:
    """The problems of one recorded answer (tests/sglangprotocol_record.py writes them):
    ``{"kind", "endpoint", "body"}`` (+ ``status``); a ``stream`` body is the raw SSE text,
    checked chunk by chunk; ``info`` records (/model_info, /server_info) have no model here."""
    kind, path, body = record["kind"], record["endpoint"], record["body"]
    status = record.get("status")
    expected = 400 if kind == "error" else 200
    problems = [] if status in (None, expected) else [f"HTTP {status}, expected {expected}"]
    if kind == "info":
        return problems
    if kind != "stream":
        return problems + proto.check(kind, path, body)
    chunks = sse_payloads(body)
    if not chunks or chunks[-1] != "[DONE]":
        problems.append("the stream does not end with data: [DONE]")
    for index, chunk in enumerate(c for c in chunks if c != "[DONE]"):
        problems += [f"chunk {index}: {p}" for p in proto.check("chunk", path, chunk)]
    return problems
