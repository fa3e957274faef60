"""The server's tokenizer path (a container path, as /model_info reports it) mapped to the host's
model directory that the profile mounts there, and bench's use of it for token-exact prompts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from benchprofile import bench_request, sim_profile

from opsctl.core.errors import UsageError
from opsctl.traffic import app as traffic
from opsctl.traffic.served import host_path_of, local_tokenizer


@pytest.mark.parametrize(("container", "target", "source", "host"), [
    ("/models/GLM-5", "/models/GLM-5", "/srv/w", "/srv/w"),
    ("/models/GLM-5/", "/models/GLM-5/", "/srv/w", "/srv/w"),
    ("/models/GLM-5/tok/tokenizer.json", "/models/GLM-5", "/srv/w", "/srv/w/tok/tokenizer.json"),
    ("/models//GLM-5/./tok", "/models/GLM-5", "/srv/w", "/srv/w/tok"),
    ("/models/GLM-5/../other", "/models/GLM-5", "/srv/w", None),  # climbs out of the mount
    ("/models/GLM-50", "/models/GLM-5", "/srv/w", None),  # a sibling that shares the prefix
    ("zai-org/GLM-5", "/models/GLM-5", "/srv/w", None),  # a hub id: nothing on this host
    ("", "/models/GLM-5", "/srv/w", None),
    ("/anything/x", "/", "/srv/root", "/srv/root/anything/x"),
])
def test_host_path_of(container: str, target: str, source: str, host: str | None) -> None:
    assert host_path_of(container, target, source) == (Path(host) if host else None)


def make_tokenizer(directory: Path) -> Path:
    """Only the file's presence matters here (the component test reads a real one)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text("{}")
    return directory / "tokenizer.json"


def test_local_tokenizer_finds_the_file_or_names_the_option(tmp_path: Path) -> None:
    file = make_tokenizer(tmp_path / "weights")
    assert local_tokenizer("/models/m", "/models/m", str(tmp_path / "weights")) == file
    assert (
        local_tokenizer("/models/m/tokenizer.json", "/models/m", str(tmp_path / "weights")) == file
    )
    for args, why in (
        (("/models/m", "/models/m", None), "mounts no model.host_path"),
        (("/elsewhere/m", "/models/m", str(tmp_path)), "not under the model mount /models/m"),
        (("/models/m/sub", "/models/m", str(tmp_path / "weights")), "no tokenizer.json at"),
        (("/models/m", "/models/m", str(tmp_path / "missing")), "no tokenizer.json at"),
    ):
        with pytest.raises(UsageError, match=why) as caught:
            local_tokenizer(*args)
        assert "--tokenizer" in (caught.value.hint or "") and "\n" not in caught.value.message


def no_client(*args: object, **kwargs: object) -> Any:
    raise AssertionError("no request may be sent before the workload is resolved")


def test_random_with_a_profile_that_cannot_map_fails_before_any_request(tmp_path: Path) -> None:
    request = bench_request(sim_profile(tmp_path, None), "http://127.0.0.1:9",
                            out_dir=tmp_path / "out")
    with pytest.raises(UsageError, match="mounts no model.host_path") as caught:
        traffic.bench(request, launcher=no_client, push=no_client, plot=no_client,
                      client_factory=no_client)
    assert "--tokenizer" in (caught.value.hint or "")
    assert not (tmp_path / "out").exists()
