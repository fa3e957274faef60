"""The post-build verification container is removed even when Ctrl-C lands while the daemon
creates it (the client then never learns its id: it is found by the name opsctl gave it), and
when the daemon finishes that create only after the first look (found by this run's label)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest

from opsctl.engine import dockerpy
from opsctl.engine.dockerpy import DockerEngine


class InterruptedCreate:
    """A docker client whose create is interrupted after the daemon made the container."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.removed: list[str] = []
        self.containers = SimpleNamespace(create=self._create)
        self.api = SimpleNamespace(remove_container=self._remove)

    def _create(self, **kwargs: Any) -> None:
        self.created.append(kwargs["name"])
        raise KeyboardInterrupt

    def _remove(self, name: str, force: bool = False) -> None:
        self.removed.append(name)


def test_ctrl_c_during_create_removes_the_container_by_its_name() -> None:
    client = InterruptedCreate()
    engine = DockerEngine(client)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        engine.run_to_completion("opsctl/sim:x", ["python3", "-c", "pass"])
    assert client.created and client.created[0].startswith("opsctl-verify-")
    assert client.removed == client.created


class LateCreate:
    """A docker client whose create is cut off before the daemon made the container; the daemon
    makes it only after opsctl's first look (a remove by name that finds nothing), as CI saw.
    Another run's throwaway container is there throughout and must stay."""

    def __init__(self, lands_after_lists: int = 0) -> None:
        self.containers_made: list[dict[str, Any]] = [
            {"Id": "theirs", "Names": ["/opsctl-verify-theirs"],
             "Labels": {"opsctl.managed": "true", "opsctl.role": "verify",
                        "opsctl.run-id": "theirs"}}]
        self.pending: dict[str, Any] | None = None
        self.lands_after_lists = lands_after_lists
        self.lists = 0
        self.removed: list[str] = []
        self.containers = SimpleNamespace(create=self._create)
        self.api = SimpleNamespace(remove_container=self._remove, containers=self._list)

    def _create(self, **kwargs: Any) -> None:
        self.pending = {"Id": "mine", "Names": ["/" + kwargs["name"]], "Labels": kwargs["labels"]}
        raise KeyboardInterrupt

    def _land(self) -> None:
        if self.pending is not None:
            self.containers_made.append(self.pending)
            self.pending = None

    def _remove(self, ref: str, force: bool = False) -> None:
        for container in self.containers_made:
            if ref in (container["Id"], container["Names"][0][1:]):
                self.containers_made.remove(container)
                self.removed.append(container["Id"])
                return
        if self.lands_after_lists == 0:
            self._land()  # the daemon finishes the create just after the first look
        raise docker.errors.NotFound("No such container")

    def _list(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[Any]:
        self.lists += 1
        if self.lists > self.lands_after_lists:
            self._land()
        wanted = dict(item.split("=", 1) for item in (filters or {}).get("label", []))
        return [c for c in self.containers_made
                if all and all_of(wanted, c["Labels"])]


def all_of(wanted: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in wanted.items())


@pytest.mark.parametrize("lands_after_lists", [0, 2])
def test_a_create_the_daemon_finishes_after_the_first_look_is_found_and_removed(
        lands_after_lists: int) -> None:
    client = LateCreate(lands_after_lists)
    engine = DockerEngine(client)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        engine.run_to_completion("opsctl/sim:x", ["python3", "-c", "pass"])
    assert client.removed == ["mine"]  # never the other run's verification container
    assert [c["Id"] for c in client.containers_made] == ["theirs"]


def test_the_second_look_is_bounded_when_the_create_never_landed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = LateCreate(lands_after_lists=10**6)
    monkeypatch.setattr(dockerpy, "LATE_CREATE_SECONDS", 0.3)
    engine = DockerEngine(client)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        engine.run_to_completion("opsctl/sim:x", ["python3", "-c", "pass"])
    assert client.removed == [] and client.lists >= 1
    assert [c["Id"] for c in client.containers_made] == ["theirs"]
