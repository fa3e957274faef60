"""The post-build verification container is removed even when Ctrl-C lands while the daemon
creates it (the client then never learns its id: it is found by the name opsctl gave it)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

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
