"""`opsctl build --push`: only verified images are pushed, the registry's digest is recorded and
answered by `pushed_reference`, every failure is one line (fake engine; the real registry is in
tests/integration/test_push_registry.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from fakes import FakeEngine

from opsctl.core.errors import EXIT_USAGE, BuildError, LaunchError, UsageError
from opsctl.engine import dockerpy as dockerimages
from opsctl.engine.api import BuildEvent
from opsctl.image import registry, trust
from opsctl.image.build import BuildResult
from opsctl.image.lock import BaseResolution

REPO = "127.0.0.1:5000/team/opsctl-sim"
LOCAL = "opsctl/sim:0.5.23-0123456789abcdef"
CONTENT = "c" * 64
DIGEST = "sha256:" + "d" * 64


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPSCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def built(engine: FakeEngine, tag: str = LOCAL, verified: bool = True) -> BuildResult:
    image_id = engine.add_image(tag)
    if verified:
        trust.record_verified(image_id, tag, CONTENT)
    base = BaseResolution(ref="opsctl/debian-base:bookworm", from_ref="sha256:" + "a" * 64,
                          digest="sha256:" + "a" * 64, kind="image-id")
    return BuildResult(tag=tag, image_id=image_id, content_hash=CONTENT, base=base, skipped=False)


def test_a_verified_image_is_pushed_under_its_own_tag_and_its_digest_recorded() -> None:
    engine = FakeEngine()
    result = built(engine)
    engine.push_digests[f"{REPO}:0.5.23-0123456789abcdef"] = DIGEST
    events: list[BuildEvent] = []
    pushed = registry.push(engine, result, REPO, events.append)
    assert pushed.target == f"{REPO}:0.5.23-0123456789abcdef" and pushed.digest == DIGEST
    assert pushed.reference == f"{REPO}@{DIGEST}"
    assert engine.images[pushed.target].id == result.image_id  # the verified image, by id
    assert any(e.step == "push" for e in events)
    assert registry.pushed_reference(LOCAL) == registry.pushed_reference(result.image_id) \
        == f"{REPO}@{DIGEST}"
    assert registry.pushed_reference(LOCAL, repository="elsewhere/repo") is None
    record = json.loads(registry.record_path().read_text())[result.image_id]
    assert record["local_tag"] == LOCAL and record["content_hash"] == CONTENT
    assert record["pushes"][REPO]["digest"] == DIGEST


def test_an_image_this_host_did_not_verify_is_refused() -> None:
    engine = FakeEngine()
    result = built(engine, verified=False)
    with pytest.raises(BuildError, match="not verified on this host"):
        registry.push(engine, result, REPO, lambda e: None)
    assert "push" not in engine.calls and not registry.record_path().exists()


def test_a_failed_push_records_nothing() -> None:
    engine = FakeEngine()
    result = built(engine)
    with pytest.raises(BuildError, match="connection refused"):
        registry.push(engine, result, REPO, lambda e: None)
    assert registry.pushed_reference(LOCAL) is None


def test_an_answer_that_is_not_a_digest_is_never_recorded() -> None:
    engine = FakeEngine()
    result = built(engine)
    engine.push_digests[f"{REPO}:0.5.23-0123456789abcdef"] = "sha256:short"
    with pytest.raises(BuildError, match="no sha256 digest"):
        registry.push(engine, result, REPO, lambda e: None)
    assert registry.pushed_reference(LOCAL) is None


def test_a_tag_resolves_to_its_latest_push_and_a_broken_record_to_none() -> None:
    engine = FakeEngine()
    target = f"{REPO}:0.5.23-0123456789abcdef"
    engine.push_digests[target] = DIGEST
    first = built(engine)
    registry.push(engine, first, REPO, lambda e: None)
    second = built(engine)  # rebuilt under the same tag (--force), pushed again
    engine.push_digests[target] = "sha256:" + "e" * 64
    registry.push(engine, second, REPO, lambda e: None)
    records = json.loads(registry.record_path().read_text())
    records[first.image_id]["pushes"][REPO]["pushed_at"] = "2020-01-01T00:00:00+00:00"
    registry.record_path().write_text(json.dumps(records))
    assert registry.pushed_reference(LOCAL) == f"{REPO}@sha256:{'e' * 64}"
    assert registry.pushed_reference(first.image_id) == f"{REPO}@{DIGEST}"
    records[second.image_id]["pushes"][REPO]["digest"] = "sha256:typed-by-hand"
    registry.record_path().write_text(json.dumps(records))
    assert registry.pushed_reference(second.image_id) is None
    registry.record_path().write_text("{not json")
    assert registry.pushed_reference(LOCAL) is None


@pytest.mark.parametrize("broken", ["deep", "huge"])
def test_a_hostile_record_file_reads_as_no_record(broken: str) -> None:
    """Deeper than json can parse (was a RecursionError traceback), or larger than opsctl ever
    writes (was read whole into memory, however large): no record."""
    padded = {"sha256:" + "1" * 64: {"local_tag": LOCAL, "pushes": {REPO: {"digest": DIGEST}},
                                     "padding": "y" * (9 << 20)}}
    registry.record_path().parent.mkdir(parents=True, exist_ok=True)
    registry.record_path().write_text("[" * 100_000 if broken == "deep" else json.dumps(padded))
    assert registry.pushed_reference(LOCAL) is None and trust.read_records(
        registry.record_path()) == {}


def test_a_digest_or_repository_with_a_trailing_newline_is_not_a_reference() -> None:
    """`$` matches before a final newline: such a record would put a broken image into a
    manifest."""
    good = {"digest": DIGEST}
    for repo, entry in [(REPO, {"digest": DIGEST + "\n"}), (REPO + "\n", good)]:
        records = {"sha256:" + "1" * 64: {"local_tag": LOCAL, "pushes": {repo: entry}}}
        registry.record_path().parent.mkdir(parents=True, exist_ok=True)
        registry.record_path().write_text(json.dumps(records))
        assert registry.pushed_reference(LOCAL) is None


@pytest.mark.parametrize("value", ["registry.example.com/team/opsctl", "127.0.0.1:5000/opsctl/sim",
                                   "localhost:5000/a", "team/opsctl-sglang", "[::1]:5000/x/y"])
def test_repositories_docker_accepts(value: str) -> None:
    assert registry.check_repository(value) == value


@pytest.mark.parametrize(("value", "hint"), [
    ("127.0.0.1:5000/opsctl/sim:v1", "no tag"), ("Registry.example.com/Team", "lower case"),
    ("user:secret@registry.example.com/x", "docker login"), ("reg/x@sha256:" + "d" * 64, "digest"),
    ("", "lower case"), ("reg.example.com/", "lower case"), ("reg.example.com/x\n", "lower case")])
def test_repositories_refused_before_any_build(value: str, hint: str) -> None:
    with pytest.raises(UsageError) as raised:
        registry.check_repository(value)
    assert raised.value.exit_code == EXIT_USAGE and hint in raised.value.hint


# --- the Docker side: the stream the daemon answers a push with ---------------------------------


class StubAPI:
    """docker-py's APIClient as far as a push uses it: tag, push (a decoded stream), timeout."""

    def __init__(self, chunks: list[dict[str, Any]], missing: bool = False) -> None:
        self.chunks, self.missing, self.timeout = chunks, missing, 10
        self.tagged: list[tuple[str, str, str]] = []
        self.untagged: list[str] = []
        self.timeout_during_push = 0

    def tag(self, image: str, repository: str, tag: str) -> bool:
        if self.missing:
            raise docker.errors.ImageNotFound("no such image")
        self.tagged.append((image, repository, tag))
        return True

    def push(
        self, repository: str, tag: str, stream: bool, decode: bool
    ) -> Iterator[dict[str, Any]]:
        self.timeout_during_push = self.timeout
        return iter(self.chunks)

    def remove_image(self, image: str, force: bool, noprune: bool) -> None:
        self.untagged.append(image)


class StubClient:
    def __init__(self, api: StubAPI) -> None:
        self.api = api


def push_through(chunks: list[dict[str, Any]]) -> tuple[str, StubAPI, list[str]]:
    api, lines = StubAPI(chunks), []
    digest = dockerimages.push(StubClient(api), "sha256:" + "1" * 64,  # type: ignore[arg-type]
                               "127.0.0.1:5000/o/sim:t1", lambda e: lines.append(e.text))
    return digest, api, lines


def test_the_digest_is_the_registrys_answer() -> None:
    digest, api, lines = push_through([
        {"status": "The push refers to repository [127.0.0.1:5000/o/sim]"},
        {"status": "Pushing", "id": "ff3e7b52e1b5", "progress": "[=>   ] 1MB/9MB"},
        {"status": f"t1: digest: {DIGEST} size: 1574"},
        {"aux": {"Tag": "t1", "Digest": DIGEST, "Size": 1574}}])
    assert digest == DIGEST and api.tagged == [("sha256:" + "1" * 64, "127.0.0.1:5000/o/sim", "t1")]
    assert "ff3e7b52e1b5: Pushing [=>   ] 1MB/9MB" in lines
    assert api.timeout_during_push == dockerimages.PUSH_STALL_SECONDS and api.timeout == 10


def test_an_older_daemon_without_aux_still_gives_the_status_lines_digest() -> None:
    digest, _, _ = push_through([{"status": f"t1: digest: {DIGEST} size: 1574"}])
    assert digest == DIGEST


@pytest.mark.parametrize(("said", "hint"), [
    ('Get "http://127.0.0.1:5999/v2/": dial tcp 127.0.0.1:5999: connect: connection refused',
     "reachable"),
    ("unauthorized: authentication required", "docker login 127.0.0.1:5000"),
    ("manifest invalid: something else", "registry's message")])
def test_a_refused_push_is_one_line_with_what_to_do_and_leaves_no_tag(said: str, hint: str) -> None:
    api = StubAPI([{"status": "The push refers to repository [x]"},
                   {"errorDetail": {"message": said}, "error": said}])
    with pytest.raises(BuildError) as raised:
        dockerimages.push(StubClient(api), "sha256:" + "1" * 64,  # type: ignore[arg-type]
                          "127.0.0.1:5000/o/sim:t1", lambda e: None)
    assert raised.value.message == f"push of 127.0.0.1:5000/o/sim:t1 failed: {said}"
    assert hint in raised.value.hint
    assert api.untagged == ["127.0.0.1:5000/o/sim:t1"] and api.timeout == 10


def test_an_aux_digest_with_a_trailing_newline_is_no_digest() -> None:
    with pytest.raises(BuildError, match="without the registry's digest"):
        push_through([{"aux": {"Tag": "t1", "Digest": DIGEST + "\n", "Size": 1574}}])


def test_a_stream_without_a_digest_is_a_failure_not_a_guess() -> None:
    with pytest.raises(BuildError, match="without the registry's digest"):
        push_through([{"status": "Pushed", "id": "ff3e7b52e1b5"}])


def test_an_image_gone_before_the_push_is_named() -> None:
    with pytest.raises(LaunchError, match="not present on this engine"):
        dockerimages.push(StubClient(StubAPI([], missing=True)),  # type: ignore[arg-type]
                          "opsctl/sim:gone", "127.0.0.1:5000/o/sim:t1", lambda e: None)


def test_render_names_the_push_of_the_image_the_tag_names_now(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from opsctl.cli import render as render_cli
    from opsctl.config.profiles import load_profile
    from opsctl.core.errors import DaemonUnreachable
    from opsctl.engine import dockerpy
    from opsctl.image.plan import expected_image

    deployment = load_profile("sim").resolve("gathercast")
    tag = expected_image(deployment)
    engine = FakeEngine()
    result = built(engine, tag=tag)
    engine.push_digests[f"{REPO}:{tag.split(':', 1)[1]}"] = DIGEST
    registry.push(engine, result, REPO, lambda event: None)
    monkeypatch.setattr(dockerpy, "connect", lambda: engine)
    assert render_cli._image_ref(deployment) == (f"{REPO}@{DIGEST}", True)
    engine.add_image(tag)  # rebuilt under the same tag, not pushed again
    assert render_cli._image_ref(deployment) == (tag, False)

    def unreachable() -> FakeEngine:
        raise DaemonUnreachable("Docker daemon unreachable: test")

    monkeypatch.setattr(dockerpy, "connect", unreachable)
    assert render_cli._image_ref(deployment) == (f"{REPO}@{DIGEST}", True)
    assert "not checked against the image that tag names now" in capsys.readouterr().err
