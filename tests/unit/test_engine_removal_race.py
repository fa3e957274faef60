"""The real engine adapter (opsctl.engine.dockerpy) against a docker client that answers as the
daemon does while it finishes a removal that a Ctrl-C cut short: 409 for the log and for a second
remove, 404 once it is gone. Before: the 409 (a requests.HTTPError, so an OSError) read as "cannot
save the log under out/logs", exit 2 (found by tests/integration/test_interrupt_points.py's `tune`
case on a loaded machine)."""

from __future__ import annotations

import signal
import threading
import time
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest
import requests

from opsctl.core.errors import ContainerGone, LaunchError
from opsctl.engine import dockerpy
from opsctl.engine.dockerpy import DockerEngine


def _conflict(what: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = 409
    return docker.errors.APIError(what, response=response, explanation=what)


class Removing:
    """A daemon removing container `c1`: gone after `inspects_left` more inspections."""

    def __init__(self, inspects_left: int) -> None:
        self.inspects_left = inspects_left
        self.api = SimpleNamespace(remove_container=self._remove, inspect_container=self._inspect,
                                   _get=lambda url, **_: SimpleNamespace(close=lambda: None),
                                   _url=lambda template, cid: template.format(cid),
                                   _raise_for_status=self._raise_for_status)

    def _remove(self, container_id: str, force: bool = False) -> None:
        if self.inspects_left <= 0:
            raise docker.errors.NotFound("No such container")
        raise _conflict(f"removal of container {container_id} is already in progress")

    def _inspect(self, container_id: str) -> dict[str, Any]:
        if self.inspects_left <= 0:
            raise docker.errors.NotFound("No such container")
        self.inspects_left -= 1
        return {"Id": container_id, "State": {"Status": "removing"}}

    def _raise_for_status(self, response: Any) -> None:
        raise _conflict("can not get logs from container which is dead or marked for removal")


def test_the_log_of_a_container_being_removed_is_a_note_not_an_error() -> None:
    engine = DockerEngine(Removing(inspects_left=5))  # type: ignore[arg-type]
    chunks = list(engine.log_chunks("c1"))
    assert len(chunks) == 1 and chunks[0].startswith(b"[opsctl: no log: the engine answered 409: ")
    assert b"marked for removal" in chunks[0]


def test_a_removal_already_under_way_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dockerpy, "REMOVAL_POLL_SECONDS", 0.0)
    client = Removing(inspects_left=3)
    DockerEngine(client).remove("c1")  # type: ignore[arg-type]
    assert client.inspects_left == 0


def test_a_removal_that_never_ends_is_one_launch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dockerpy, "REMOVAL_POLL_SECONDS", 0.0)
    monkeypatch.setattr(dockerpy, "REMOVAL_WAIT_SECONDS", 0.05)
    client = Removing(inspects_left=10**9)
    with pytest.raises(LaunchError, match="still removing container c1"):
        DockerEngine(client).remove("c1")  # type: ignore[arg-type]


def test_inspecting_a_container_that_is_gone_says_so() -> None:
    with pytest.raises(ContainerGone, match="container c1 is gone"):
        DockerEngine(Removing(inspects_left=0)).inspect("c1")  # type: ignore[arg-type]


class ListedThenRemoved:
    """A daemon that lists two containers and has removed the first before it is inspected."""

    def __init__(self) -> None:
        self.api = SimpleNamespace(containers=self._list, inspect_container=self._inspect)
        # The SDK's high-level list raises NotFound for a container removed between its list
        # and its own inspect: opsctl must not go through it.
        self.containers = SimpleNamespace(list=self._sdk_list)

    def _list(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[Any]:
        return [{"Id": "gone"}, {"Id": "here"}]

    def _sdk_list(self, **_: Any) -> list[Any]:
        raise docker.errors.NotFound("No such container: gone")

    def _inspect(self, container_id: str) -> dict[str, Any]:
        if container_id == "gone":
            raise docker.errors.NotFound(f"No such container: {container_id}")
        return {"Id": container_id, "Name": "/opsctl-here", "State": {"Status": "running"},
                "Config": {"Labels": {"opsctl.managed": "true"}, "Image": "opsctl/sim:x"}}


def test_find_skips_a_container_removed_between_the_list_and_its_inspection() -> None:
    found = DockerEngine(ListedThenRemoved()).find({})  # type: ignore[arg-type]
    assert [info.id for info in found] == ["here"]


class SlowCreate:
    """A daemon that takes a while to create a container; records what is removed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.removed: list[str] = []
        self.containers = SimpleNamespace(create=self._create)
        self.api = SimpleNamespace(timeout=10, remove_container=self._remove)

    def _create(self, **_: Any) -> Any:
        time.sleep(self.seconds)
        return SimpleNamespace(id="made-late")

    def _remove(self, container_id: str, force: bool = False) -> None:
        self.removed.append(container_id)


def test_ctrl_c_while_the_daemon_creates_the_server_removes_what_it_then_creates() -> None:
    """A real SIGINT to the main thread (Python's default handler raises KeyboardInterrupt) lands
    while the create is under way; the container the daemon makes afterwards is removed. Found
    by the tune Ctrl-C module under load (seed 31): a server container left in state Created."""
    assert threading.current_thread() is threading.main_thread()
    client = SlowCreate(seconds=0.6)
    main = threading.main_thread().ident
    assert main is not None
    threading.Timer(0.15, signal.pthread_kill, (main, signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        DockerEngine(client)._create({})  # type: ignore[arg-type]
    assert client.removed == ["made-late"]


class StartInterrupted(threading.Thread):
    """A thread whose `start` is cut by Ctrl-C once the new thread runs: `Thread.start` waits
    for it to begin, and a SIGINT in that wait raises there."""

    def start(self) -> None:
        super().start()
        raise KeyboardInterrupt


def test_ctrl_c_while_the_create_thread_starts_removes_what_the_daemon_makes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by CI's `up --gate` Ctrl-C module (seed 25): a Ctrl-C inside `Thread.start`
    escaped before the wait for the create, so the server the daemon made afterwards was found
    by no clean-up and stayed in state Created."""
    client = SlowCreate(seconds=0.3)
    monkeypatch.setattr(dockerpy, "threading",
                        SimpleNamespace(Thread=StartInterrupted, Event=threading.Event))
    with pytest.raises(KeyboardInterrupt):
        DockerEngine(client)._create({})  # type: ignore[arg-type]
    assert client.removed == ["made-late"]


class NeverStarted(threading.Thread):
    """A thread whose `start` is cut by Ctrl-C before the new thread exists."""

    def start(self) -> None:
        raise KeyboardInterrupt


def test_ctrl_c_before_the_create_thread_exists_waits_only_a_bounded_moment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = SlowCreate(seconds=0.0)
    monkeypatch.setattr(dockerpy, "threading",
                        SimpleNamespace(Thread=NeverStarted, Event=threading.Event))
    monkeypatch.setattr(dockerpy, "THREAD_START_SECONDS", 0.05)
    with pytest.raises(KeyboardInterrupt):
        DockerEngine(client)._create({})  # type: ignore[arg-type]
    assert client.removed == []


class RefusedCreate:
    """A daemon that answers the create with a refusal (a bad mount, say): nothing was made."""

    def __init__(self) -> None:
        self.removed: list[str] = []
        self.listed = 0
        self.containers = SimpleNamespace(create=self._create)
        self.api = SimpleNamespace(remove_container=self._remove, containers=self._list)

    def _create(self, **_: Any) -> None:
        response = requests.Response()
        response.status_code = 400
        raise docker.errors.APIError("invalid mount config", response=response)

    def _remove(self, name: str, force: bool = False) -> None:
        self.removed.append(name)
        raise docker.errors.NotFound("No such container")

    def _list(self, **_: Any) -> list[Any]:
        self.listed += 1
        return []


def test_a_create_the_daemon_refused_is_not_looked_for_again() -> None:
    """Only a cut-off create may land later; a refusal costs one remove by name, not the
    second look's seconds of polling."""
    client = RefusedCreate()
    with pytest.raises(docker.errors.APIError):
        DockerEngine(client).run_to_completion("opsctl/sim:x", ["true"])  # type: ignore[arg-type]
    assert len(client.removed) == 1 and client.listed == 0


class CutOffCreate:
    """A daemon whose create answer never arrives (the client times out) but which makes the
    server a moment later: the name finds nothing at first, the run's label then does."""

    def __init__(self) -> None:
        self.lists = 0
        self.removed: list[str] = []
        self.containers = SimpleNamespace(create=self._create)
        self.api = SimpleNamespace(timeout=10, remove_container=self._remove,
                                   containers=self._list)

    def _create(self, **_: Any) -> None:
        raise requests.exceptions.ReadTimeout("read timed out")

    def _remove(self, name: str, force: bool = False) -> None:
        if name.startswith("opsctl-"):
            raise docker.errors.NotFound("No such container")
        self.removed.append(name)

    def _list(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[Any]:
        assert filters == {"label": ["opsctl.run-id=r1"]}, filters
        self.lists += 1
        return [{"Id": "made-late"}] if self.lists >= 2 else []


def test_a_server_create_cut_off_by_a_timeout_is_looked_for_by_its_run_id(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dockerpy, "LATE_CREATE_POLL_SECONDS", 0.01)
    client = CutOffCreate()
    with pytest.raises(requests.exceptions.ReadTimeout):
        DockerEngine(client)._create(  # type: ignore[arg-type]
            {"name": "opsctl-p-baseline", "labels": {"opsctl.run-id": "r1"}})
    assert client.removed == ["made-late"]


class NameTakenAnswerLost:
    """Another run's (or the user's) container already has the name; the daemon's 409 for our
    create is lost to a timeout. Found by review: the late look removed it by name."""

    def __init__(self) -> None:
        self.removed: list[str] = []
        self.theirs = {"Id": "theirs", "Labels": {"opsctl.run-id": "OTHER"}}
        self.containers = SimpleNamespace(create=self._create)
        self.api = SimpleNamespace(timeout=10, remove_container=self._remove,
                                   containers=self._list)

    def _create(self, **_: Any) -> None:
        raise requests.exceptions.ReadTimeout("read timed out")

    def _remove(self, ref: str, force: bool = False) -> None:
        self.removed.append(ref)

    def _list(self, **query: Any) -> list[Any]:
        wanted = dict(item.split("=", 1) for item in (query.get("filters") or {}).get("label", []))
        labels = self.theirs["Labels"]
        assert isinstance(labels, dict)
        return [self.theirs] if all(labels.get(k) == v for k, v in wanted.items()) else []


@pytest.mark.parametrize("error", [requests.exceptions.ReadTimeout("lost"), TypeError("a bug")])
def test_a_lost_create_never_removes_a_container_of_that_name_it_did_not_make(
        monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    monkeypatch.setattr(dockerpy, "LATE_CREATE_POLL_SECONDS", 0.01)
    monkeypatch.setattr(dockerpy, "LATE_CREATE_SECONDS", 0.05)
    client = NameTakenAnswerLost()
    client.containers.create = lambda **_: (_ for _ in ()).throw(error)
    with pytest.raises(type(error)):
        DockerEngine(client)._create(  # type: ignore[arg-type]
            {"name": "opsctl-p-baseline", "labels": {"opsctl.run-id": "mine"}})
    assert client.removed == []


def test_the_pieces_of_a_long_line_lose_their_stamps_and_the_line_is_whole() -> None:
    """Docker splits a line past 16 KiB into pieces and stamps each (checked on this machine's
    engine: three frames for a 56k line, each `<RFC 3339 time> ` first); a secret across a cut
    read `...KEY12<stamp> 3...`. Frames as the engine sent them, stdout (1) and stderr (2)."""
    stamp = b"2026-12-04T14:18:49.863998901Z "
    unfinished: set[int] = set()
    frames = [(1, stamp + b"first\n"), (1, stamp + b"a" * 10 + b"KEY12"), (2, stamp + b"err\n"),
              (1, stamp + b"3" + b"b" * 10), (1, stamp + b"bb\n"), (1, stamp + b"last\n")]
    out = b"".join(dockerpy.joined_piece(stream, payload, unfinished)
                   for stream, payload in frames)
    assert out == (stamp + b"first\n" + stamp + b"a" * 10 + b"KEY12" + stamp + b"err\n"
                   + b"3" + b"b" * 10 + b"bb\n" + stamp + b"last\n")
    assert unfinished == set()
