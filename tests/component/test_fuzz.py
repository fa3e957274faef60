"""Property-based fuzzing of opsctl's three input surfaces (issue 25, item 3).

Generated inputs, seeded and bounded (hypothesis, `derandomize=True`: the same inputs every run):

- profiles: deploy/sim.yaml mutated (values of the wrong type, out of bounds, nan/inf, huge
  integers, unicode and control characters, deleted and unknown keys) and written through YAML
  features (anchors and aliases, merge keys, tags, duplicate keys, several documents, tabs, a
  BOM, bytes that are not UTF-8), run through `up --dry-run` and `profile show`;
- CLI option values: numbers, lists, URLs, image references and names drawn as text for the
  options of up, verify, smoke, bench, tune and render;
- server answers: status, headers (lengths that lie, encodings, chunked framing), bodies (JSON,
  bytes, SSE framing with every line ending) from a loopback server, read by `verify` and by
  `up`'s readiness probe.

The contract each must keep: an exit code from opsctl.core.errors.EXIT_CODES other than 1 (the
bug code), no traceback, a bounded time and memory, no half-written file (`.*.tmp`) left, and no
planted secret (the API key, a password or an `hf_` token in the profile, a key a server echoes)
in stdout, stderr or any file written. CLI calls run in-process (opsctl.cli.main, output
captured) for speed. CI runs the defaults (about 35 s); `OPSCTL_FUZZ_EXAMPLES=N` runs N examples
per class, and `OPSCTL_FUZZ_REPORT=PATH` appends each class's counts as JSON lines
(docs/hardening.md has the command and the counts).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import socketserver
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inprocess import Outcome, run_cli

from opsctl.core.errors import EXIT_BUG, EXIT_CODES
from opsctl.core.paths import project_root

DOCUMENTED = {c.code for c in EXIT_CODES} - {EXIT_BUG}
API_KEY = "sk-fuzz-planted-api-key-7f3a91c2"
PASSWORD = "fuzz-planted-password-5b8e"
HF_TOKEN = "hf_FuzzPlantedTokenAbCdEfGhIjKlMnOpQr"
SECRETS = (API_KEY, PASSWORD, HF_TOKEN)
NO_ENGINE = "unix:///nonexistent/opsctl-fuzz-docker.sock"
CALL_LIMIT_S = 20.0  # one in-process command; the slowest valid one takes about a second
MEMORY_GROWTH_LIMIT = 512 << 20  # peak RSS over the whole class
EXAMPLES = int(os.environ.get("OPSCTL_FUZZ_EXAMPLES", "0"))
REPORT = os.environ.get("OPSCTL_FUZZ_REPORT")  # read here: each test clears OPSCTL_* for its calls


def budget(default: int) -> settings:
    return settings(max_examples=EXAMPLES or default, derandomize=True, database=None,
                    deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


# --- running the CLI in-process and checking the contract --------------------------------------


@dataclass
class Tally:
    name: str
    outcomes: Counter[str] = field(default_factory=Counter)
    tried: int = 0

    def add(self, outcome: Outcome) -> None:
        self.tried += 1
        self.outcomes[f"exit {outcome.code}"] += 1

    def report(self) -> None:
        line = {
            "class": self.name,
            "tried": self.tried,
            "outcomes": dict(sorted(self.outcomes.items())),
        }
        if REPORT:
            with open(REPORT, "a") as handle:
                handle.write(json.dumps(line) + "\n")
        print(json.dumps(line), file=sys.stderr)


def written_texts(root: Path) -> Iterator[tuple[Path, str]]:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            yield path, path.read_bytes()[: 4 << 20].decode("utf-8", errors="replace")


def check_contract(outcome: Outcome, work: Path, *, allowed: set[int] = DOCUMENTED,
                   inputs: tuple[Path, ...] = ()) -> None:
    shown = f"exit {outcome.code}\nstdout: {outcome.out[-1500:]}\nstderr: {outcome.err[-3000:]}"
    assert outcome.code in allowed, shown
    assert "Traceback" not in outcome.out + outcome.err, shown
    assert outcome.seconds < CALL_LIMIT_S, shown
    for secret in SECRETS:
        assert secret not in outcome.out and secret not in outcome.err, f"{secret} printed\n{shown}"
    for path, text in written_texts(work):
        if path in inputs:
            continue
        assert not (path.name.startswith(".") and path.name.endswith(".tmp")), f"left {path}"
        for secret in SECRETS:
            assert secret not in text, f"{secret} written to {path}"


class MemoryBound:
    def __init__(self) -> None:
        self.start = self._peak()

    @staticmethod
    def _peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def check(self) -> None:
        grown = self._peak() - self.start
        assert grown < MEMORY_GROWTH_LIMIT, f"peak RSS grew by {grown >> 20} MiB"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory of every call (reports go under out/ here), the state directory,
    no Docker engine (a command that reached it exits 6) and the planted API key."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("OPSCTL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OPSCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    monkeypatch.setenv("OPSCTL_API_KEY", API_KEY)
    monkeypatch.setenv("FUZZ_HOST_SECRET", PASSWORD)  # what container.env_from_host may copy
    return tmp_path


# --- profiles ------------------------------------------------------------------------------

def base_profile() -> dict[str, Any]:
    """deploy/sim.yaml with two of its variants (one with `expect:`): each variant costs a parse."""
    data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    data["variants"] = {name: data["variants"][name] for name in ("gathercast", "native")}
    data["eval"]["gsm8k"]["dataset"] = str(project_root() / data["eval"]["gsm8k"]["dataset"])
    data["eval"]["gsm8k"]["shots_from"] = str(project_root() / data["eval"]["gsm8k"]["shots_from"])
    return data


BASE = base_profile()


def leaf_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        found = [prefix] if prefix else []
        for key, item in value.items():
            found += leaf_paths(item, (*prefix, key))
        return found
    if isinstance(value, list):
        return [
            prefix,
            *[p for i, item in enumerate(value) for p in leaf_paths(item, (*prefix, i))],
        ]
    return [prefix]


PATHS = leaf_paths(BASE)
WEIRD_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30) | \
    st.sampled_from(["", " ", "\n", "\t\x00", "[/x][bold red]m[/]", "\x1b[31mred", "é" * 5,
                     "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "../../etc/passwd", "a" * 300, "0x10", "1e309", "nan", "-inf",
                     "Ünïcode/Repo", "ghcr.io/x/y@sha256:" + "a" * 64, "rel/sim --privileged"])
HOSTILE_VALUE = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), WEIRD_TEXT,
    st.lists(st.integers(-5, 10**12) | WEIRD_TEXT, max_size=4),
    st.dictionaries(WEIRD_TEXT, st.integers(-5, 5) | WEIRD_TEXT, max_size=3),
)
SECRET_PLANTS = [
    None,
    ("container", "env", "HF_TOKEN", HF_TOKEN),
    ("container", "env", "DB_PASS", PASSWORD),
    ("container", "env", "UPSTREAM_AUTH", PASSWORD),
    ("container", "env", "MODEL_REVISION", HF_TOKEN),  # an hf_ value under an innocent name
    ("variants", "native", "env", "SERVICE_SECRET", PASSWORD),
]


def set_path(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def delete_path(data: Any, path: tuple[Any, ...]) -> None:
    for key in path[:-1]:
        data = data[key]
    del data[path[-1]]


@st.composite
def mutated_profile(draw: st.DrawFn) -> dict[str, Any]:
    data = json.loads(json.dumps(BASE))
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 3]))):
        path = draw(st.sampled_from(PATHS))
        op = draw(st.sampled_from(["replace", "replace", "delete", "unknown"]))
        try:
            if op == "replace":
                set_path(data, path, draw(HOSTILE_VALUE))
            elif op == "delete":
                delete_path(data, path)
            else:
                target = data
                for key in path[:-1]:
                    target = target[key]
                if isinstance(target, dict):
                    target[draw(WEIRD_TEXT) or "x_unknown"] = draw(HOSTILE_VALUE)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed or retyped the path
    plant = draw(st.sampled_from(SECRET_PLANTS))
    if plant is not None:
        with contextlib.suppress(KeyError, IndexError, TypeError):
            set_path(data, plant[:-1], plant[-1])
    return data


YAML_FEATURES = [
    *[lambda text: text] * 6,  # plain YAML most often, so most mutations reach the schema
    lambda text: "---\n" + text + "\n---\nname: second\n",  # two documents
    lambda text: "\ufeff" + text,  # a byte-order mark
    lambda text: text + "\nname: again\n",  # a duplicate key
    lambda text: "anchor: &a {x: 1}\nmerged: {<<: *a}\n" + text,
    lambda text: text.replace("server:\n", "server: &srv\n", 1) + "\nalias_of_server: *srv\n",
    lambda text: "x: &b [1, [2, [3, [4]]]]\ny: [*b, *b, *b, *b]\n" + text,
    lambda text: text + "\nextra: !!python/object/apply:os.system ['true']\n",
    lambda text: text + "\nblob: !!binary aGVsbG8=\n",
    lambda text: text + "\n? [a, b]\n: complex\n",
    lambda text: text.replace("  ", "\t", 3),  # tabs where YAML wants spaces
    lambda text: text + "\nwhen: 2001-12-14t21:59:43.10-05:00\n",
    lambda text: text[: len(text) // 2],  # cut mid-way
]


@st.composite
def profile_text(draw: st.DrawFn) -> bytes:
    text = yaml.safe_dump(draw(mutated_profile()), allow_unicode=True, sort_keys=False)
    raw = draw(st.sampled_from(YAML_FEATURES))(text).encode("utf-8", errors="surrogatepass")
    if draw(st.integers(0, 9)) == 9:
        raw = raw.replace(b"glm-5", b"glm-\xff\xfe", 1)  # not UTF-8
    return raw


def test_fuzz_profiles(work: Path) -> None:
    tally, memory = Tally("profiles"), MemoryBound()
    profile = work / "fuzz.yaml"

    @budget(25)
    @given(raw=profile_text(), command=st.sampled_from([("up", "--dry-run"), ("profile", "show")]))
    def check(raw: bytes, command: tuple[str, ...]) -> None:
        profile.write_bytes(raw)
        outcome = run_cli(*command, "--profile", str(profile))
        tally.add(outcome)
        check_contract(outcome, work, allowed={0, 2}, inputs=(profile,))
        memory.check()

    check()
    tally.report()


# --- CLI option values ---------------------------------------------------------------------

NUMBER_TEXT = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e309", "-0", "0", "1_000", "0x10", "１２", "", " ",
                     "1,2", "1e-400", "3.5", "99999999999999999999"]),
    WEIRD_TEXT,
)
LIST_TEXT = st.lists(st.sampled_from(["1", "2", "", " ", "0", "-1", "a", "1e3", "nan", "9" * 30]),
                     max_size=5).map(",".join) | WEIRD_TEXT
URL_TEXT = st.sampled_from([
    "http://127.0.0.1:1", "http://127.0.0.1:99999", "not a url", "", "ftp://127.0.0.1/x",
    "http://user:" + PASSWORD + "@127.0.0.1:1", "http://[::1", "http://127.0.0.1:1/\n",
    "http://" + "a" * 300, "http://127.0.0.1:0"]) | WEIRD_TEXT
REFUSED = "http://127.0.0.1:1"  # nothing listens: a command that got this far stops at once

OPTION_CASES: list[tuple[tuple[str, ...], str, st.SearchStrategy[str]]] = [
    (("up", "--dry-run"), "--timeout", NUMBER_TEXT),
    (("up", "--dry-run"), "--image", WEIRD_TEXT),
    (("up", "--dry-run"), "--variant", WEIRD_TEXT),
    (("verify", "--base-url", REFUSED), "--timeout", NUMBER_TEXT),
    (("verify",), "--base-url", URL_TEXT),
    (("verify", "--base-url", REFUSED), "--json", WEIRD_TEXT),
    (("smoke", "--base-url", REFUSED), "--request-timeout", NUMBER_TEXT),
    (("smoke", "--base-url", REFUSED), "--eval-threshold", NUMBER_TEXT),
    (("smoke", "--base-url", REFUSED), "--api", WEIRD_TEXT),
    (("smoke",), "--base-url", URL_TEXT),
    (("smoke", "--base-url", REFUSED), "--pushgateway", URL_TEXT),
    (("bench", "--base-url", REFUSED, "--requests", "1"), "--concurrency", LIST_TEXT),
    (("bench", "--base-url", REFUSED), "--requests", NUMBER_TEXT),
    (("bench", "--base-url", REFUSED), "--deadline", NUMBER_TEXT),
    (("bench", "--base-url", REFUSED), "--goodput", WEIRD_TEXT),
    (("bench", "--base-url", REFUSED), "--dataset-name", WEIRD_TEXT),
    (("decide",), "--variants", LIST_TEXT),
    (("tune", "--param", "cuda_graph_max_bs=16,32"), "--budget", NUMBER_TEXT),
    (("tune", "--param", "cuda_graph_max_bs=16,32"), "--request-timeout", NUMBER_TEXT),
    (("tune",), "--param", WEIRD_TEXT),
    (("tune",), "--param", LIST_TEXT.map(lambda values: f"cuda_graph_max_bs={values}")),
    (("render", "k8s", "--out", "k8s", "--force"), "--replicas", NUMBER_TEXT),
    (("render", "k8s", "--out", "k8s", "--force"), "--namespace", WEIRD_TEXT),
    (("render", "k8s", "--out", "k8s", "--force"), "--name", WEIRD_TEXT),
]


@st.composite
def option_case(draw: st.DrawFn) -> tuple[str, ...]:
    head, option, values = draw(st.sampled_from(OPTION_CASES))
    return (*head, option, draw(values))


def test_fuzz_cli_options(work: Path) -> None:
    tally, memory = Tally("cli options"), MemoryBound()

    @budget(50)
    @given(args=option_case())
    def check(args: tuple[str, ...]) -> None:
        outcome = run_cli(*args)
        tally.add(outcome)
        check_contract(outcome, work)
        memory.check()

    check()
    tally.report()


# --- server answers ------------------------------------------------------------------------


class _AnswerServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    answer: bytes = b""


class _AnswerHandler(socketserver.StreamRequestHandler):
    server: _AnswerServer

    def handle(self) -> None:
        self.connection.settimeout(5)
        try:
            while self.rfile.readline(65536) not in (b"\r\n", b"\n", b""):
                pass
            self.wfile.write(self.server.answer)
            self.wfile.flush()
        except OSError:
            return


@contextlib.contextmanager
def answer_server() -> Iterator[_AnswerServer]:
    server = _AnswerServer(("127.0.0.1", 0), _AnswerHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats() | WEIRD_TEXT
    | st.just(API_KEY) | st.just(f"Bearer {API_KEY}") | st.just("\x1b]0;t\x07\x1b[31m\nrow"),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(WEIRD_TEXT, inner, max_size=4),
    max_leaves=12)
SERVER_INFO_KEYS = ["version", "tp_size", "kv_cache_dtype", "attention_backend", "model_path",
                    "dsa_decode_backend", "mem_fraction_static", "served_model_name"]
SERVER_INFO = st.dictionaries(st.sampled_from(SERVER_INFO_KEYS) | WEIRD_TEXT, JSON_VALUE,
                              max_size=8).map(lambda d: {"data": [{"id": "glm-5"}], **d})
ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\r", b""])


@st.composite
def sse_body(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(st.one_of(
        JSON_VALUE.map(lambda v: b"data: " + json.dumps(v).encode()),
        st.sampled_from([b"data: [DONE]", b": comment", b"event: x", b"data:", b"retry: 5",
                         b"data: {", b"\xff\xfe"])), max_size=6))
    ending = draw(ENDINGS)
    return b"".join(line + ending + draw(ENDINGS) for line in lines)


@st.composite
def server_answer(draw: st.DrawFn) -> bytes:
    status = draw(st.sampled_from([200, 200, 200, 201, 204, 301, 302, 400, 401, 403, 404, 500,
                                   502, 503, 599, 99, 1000]))
    reason = draw(st.sampled_from([b"OK", b"", b"\xff", b"A" * 200]))
    body = draw(st.one_of(
        SERVER_INFO.map(lambda d: json.dumps(d).encode()),
        JSON_VALUE.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=200), sse_body(),
        st.just(b"[" * 5000 + b"]" * 5000),  # nested past the recursion limit
    ))
    headers = [b"Content-Type: " + draw(st.sampled_from(
        [b"application/json", b"text/event-stream", b"text/html", b"", b"\xff/\xfe"]))]
    framing = draw(st.sampled_from(["length", "none", "short", "long", "negative", "chunked",
                                    "bad-chunk", "gzip", "garbage-length"]))
    if framing == "length":
        headers.append(b"Content-Length: %d" % len(body))
    elif framing == "short":
        headers.append(b"Content-Length: %d" % (len(body) + 50))
    elif framing == "long":
        headers.append(b"Content-Length: %d" % (1 << 40))
    elif framing == "negative":
        headers.append(b"Content-Length: -5")
    elif framing == "garbage-length":
        headers.append(b"Content-Length: 12abc")
    elif framing == "gzip":
        headers += [b"Content-Encoding: gzip", b"Content-Length: %d" % len(body)]
    elif framing in ("chunked", "bad-chunk"):
        headers.append(b"Transfer-Encoding: chunked")
        size = b"%x" % len(body) if framing == "chunked" else b"zz"
        body = size + b"\r\n" + body + b"\r\n0\r\n\r\n"
    extra = draw(st.lists(st.sampled_from([
        b"X-Echo: " + API_KEY.encode(), b"Location: http://127.0.0.1:1/elsewhere",
        b"Set-Cookie: a=b", b"X-Bad\xff: \xfe", b"Content-Type: text/plain", b": empty-name",
        b"X-Long: " + b"v" * 9000]), max_size=3))
    head = b"HTTP/1.1 %d %s\r\n" % (status, reason) + b"".join(h + b"\r\n" for h in headers + extra)
    return head + b"Connection: close\r\n\r\n" + body


def test_fuzz_server_answers(work: Path) -> None:
    from opsctl.deploy import readiness

    tally, probes, memory = Tally("server answers (verify)"), Tally("server answers (probe)"), \
        MemoryBound()
    with answer_server() as server, readiness.http_client() as client:
        url = f"http://127.0.0.1:{server.server_address[1]}"

        @budget(15)
        @given(answer=server_answer())
        def check_verify(answer: bytes) -> None:
            server.answer = answer
            outcome = run_cli("verify", "--base-url", url, "--timeout", "2",
                              "--json", str(work / "verify.json"))
            tally.add(outcome)
            check_contract(outcome, work, allowed={0, 4})
            assert "\x1b" not in outcome.out + outcome.err, "a server's escape code printed raw"
            memory.check()

        @budget(120)
        @given(answer=server_answer())
        def check_probe(answer: bytes) -> None:
            server.answer = answer
            started = time.monotonic()
            try:
                state = readiness.probe(client, url, "glm-5", timeout_s=2)
            except Exception:  # noqa: BLE001 - the probe must classify every answer
                pytest.fail(f"probe raised for {answer[:300]!r}:\n{traceback.format_exc()}")
            probes.tried += 1
            probes.outcomes[state.phase.value] += 1
            assert time.monotonic() - started < CALL_LIMIT_S
            assert "\n" not in state.detail  # one line; it is printed through redact
            memory.check()

        check_verify()
        check_probe()
    tally.report()
    probes.report()


def test_the_planted_secrets_are_the_ones_opsctl_would_see() -> None:
    """The fuzzer's secrets are shaped like what opsctl must hide: else the checks prove nothing."""
    from opsctl.config.profile_checks import is_secret_name, secret_value_problem
    from opsctl.core.redact import redact

    assert (
        is_secret_name("HF_TOKEN") and is_secret_name("DB_PASS") and is_secret_name("UPSTREAM_AUTH")
    )
    assert secret_value_problem(HF_TOKEN) and not secret_value_problem("flashinfer")
    assert API_KEY not in redact(f"x {API_KEY} y", API_KEY)
    with socket.socket() as probe:  # REFUSED really refuses: nothing listens on port 1
        assert probe.connect_ex(("127.0.0.1", 1)) != 0
