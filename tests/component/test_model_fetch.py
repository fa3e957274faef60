"""`opsctl model fetch` as a user runs it: the real huggingface_hub client against a local
stand-in hub (tests/hubstub.py, through the client's own HF_ENDPOINT setting), a tiny
GLM-5-shaped repository (tests/checkpoints.py), and the host-side preflight afterwards."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from checkpoints import write_checkpoint
from conftest import OpsctlRunner
from hubstub import Repo, StubHub

from opsctl.core.errors import EXIT_HOST, EXIT_INTERRUPTED, EXIT_USAGE
from opsctl.core.paths import project_root

REPO = "stub/GLM-5-tiny"
MTP_REPO = "stub/GLM-5-tiny-MTP"
SHARD = "model-00002-of-00002.safetensors"


def profile(tmp_path: Path, weights: Path, mtp_weights: Path) -> Path:
    """deploy/sim.yaml with a checkpoint to fetch, and an MTP variant with its own."""
    data = yaml.safe_load((project_root() / "deploy" / "sim.yaml").read_text())
    data["name"] = "fetch-test"
    data["model"].update({"repo": REPO, "host_path": str(weights),
                          "mtp": {"repo": MTP_REPO, "host_path": str(mtp_weights)}})
    data["variants"]["mtp"] = {
        "server": {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                   "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}}
    path = tmp_path / "fetch-test.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def repos(tmp_path: Path) -> dict[str, Repo]:
    plain = write_checkpoint(tmp_path / "hub" / "plain", nextn=False)
    (plain / "pytorch_model.bin").write_bytes(b"\0" * 32)  # not a file serving reads
    with_nextn = write_checkpoint(tmp_path / "hub" / "mtp")
    return {REPO: Repo(plain), MTP_REPO: Repo(with_nextn)}


def fetch(opsctl: OpsctlRunner, endpoint: str, path: Path, *args: str,
          **env: str) -> subprocess.CompletedProcess[str]:
    return opsctl("model", "fetch", "-p", str(path), *args, timeout=120,
                  HF_ENDPOINT=endpoint, HF_HOME=str(path.parent / "hf-home"), **env)


def test_a_fetch_downloads_the_serving_files_at_one_commit_and_checks_them(
        tmp_path: Path, repos: dict[str, Repo], opsctl: OpsctlRunner) -> None:
    weights = tmp_path / "weights"
    hub = StubHub(repos)
    with hub.running() as endpoint:
        done = fetch(opsctl, endpoint, profile(tmp_path, weights, tmp_path / "mtp"))
    assert done.returncode == 0, done.stderr
    assert (weights / SHARD).read_bytes() == (repos[REPO].folder / SHARD).read_bytes()
    assert not (weights / "pytorch_model.bin").exists()  # only what serving reads
    commit = repos[REPO].commit
    assert f"commit {commit}" in done.stderr and "checkpoint ready" in done.stdout
    assert "safetensors:" in done.stdout
    downloads = [p for method, p, _ in hub.requests if method == "GET" and "/resolve/" in p]
    assert downloads and all(f"/resolve/{commit}/" in p for p in downloads)


def _large_shard(repo: Repo, size: int) -> Path:
    shard = repo.folder / SHARD
    shard.write_bytes(os.urandom(size))
    index = repo.folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["metadata"]["total_size"] = 64 + size - 16
    index.write_text(json.dumps(data))
    return shard


def test_a_dropped_connection_is_resumed_with_a_range_inside_the_run(
        tmp_path: Path, repos: dict[str, Repo], opsctl: OpsctlRunner) -> None:
    weights = tmp_path / "weights"
    shard = _large_shard(repos[REPO], 16 << 20)  # past the client's 10 MB write chunk
    hub = StubHub(repos, cut={SHARD: 1})
    with hub.running() as endpoint:
        done = fetch(opsctl, endpoint, profile(tmp_path, weights, tmp_path / "mtp"))
    assert done.returncode == 0, done.stderr
    assert (weights / SHARD).read_bytes() == shard.read_bytes()
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.endswith(SHARD) and r]
    assert ranges == [f"bytes={10 << 20}-"], hub.requests


def test_a_failed_run_leaves_no_partial_file_and_the_next_fetches_only_what_is_missing(
        tmp_path: Path, repos: dict[str, Repo], opsctl: OpsctlRunner) -> None:
    weights = tmp_path / "weights"
    path = profile(tmp_path, weights, tmp_path / "mtp")
    shard = _large_shard(repos[REPO], 1 << 20)
    hub = StubHub(repos, cut={SHARD: 100})
    with hub.running() as endpoint:
        first = fetch(opsctl, endpoint, path)
        assert first.returncode == EXIT_HOST, first.stderr
        last = first.stderr.strip().splitlines()[-2:]
        assert last[0].startswith("error: ") and last[1].startswith("hint:"), first.stderr
        assert "Traceback" not in first.stderr
        assert not (weights / SHARD).exists()  # never a partial file under its own name
        assert not list(weights.rglob("*.incomplete"))
        hub.cut.clear()
        second = fetch(opsctl, endpoint, path)
    assert second.returncode == 0, second.stderr
    assert (weights / SHARD).read_bytes() == shard.read_bytes()
    fetched = [line for line in second.stdout.splitlines() if "checkpoint ready" in line]
    # The three files before the cut one (sorted names) were kept; the other four fetched:
    assert "4 of 7 files fetched" in fetched[0], second.stdout


def test_an_mtp_variant_fetches_its_own_checkpoint_and_a_repo_without_nextn_is_refused(
        tmp_path: Path, repos: dict[str, Repo], opsctl: OpsctlRunner) -> None:
    path = profile(tmp_path, tmp_path / "weights", tmp_path / "mtp")
    with StubHub(repos).running() as endpoint:
        good = fetch(opsctl, endpoint, path, "-v", "mtp")
        assert good.returncode == 0, good.stderr
        assert "MTP (NextN) weights" in good.stdout
        # The same variant pointed at the repository without the NextN layer:
        data = yaml.safe_load(path.read_text())
        data["model"]["mtp"]["repo"] = REPO
        path.write_text(yaml.safe_dump(data))
        bad = fetch(opsctl, endpoint, path, "-v", "mtp")
    assert bad.returncode == EXIT_HOST, bad.stderr
    error = [line for line in bad.stderr.splitlines() if line.startswith("error: ")]
    assert error[0].startswith("error: checkpoint ") and "variant mtp" in error[0], bad.stderr
    assert "NextN layer" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize(("case", "expected"), [
    ("missing repository", "no repository stub/nothing-here on the hub"),
    ("missing revision", "has no revision 'v9'"),
    ("gated, no token", "is gated and the hub refused access"),
    ("gated, wrong token", "is gated and the hub refused access"),
])
def test_what_the_hub_refuses_is_one_line_exit_2_and_nothing_is_written(
        case: str, expected: str, tmp_path: Path, repos: dict[str, Repo],
        opsctl: OpsctlRunner) -> None:
    weights = tmp_path / "weights"
    path = profile(tmp_path, weights, tmp_path / "mtp")
    data = yaml.safe_load(path.read_text())
    if case == "missing repository":
        data["model"]["repo"] = "stub/nothing-here"
    if case == "missing revision":
        data["model"]["revision"] = "v9"
    path.write_text(yaml.safe_dump(data))
    hub = StubHub(repos, gated={REPO} if case.startswith("gated") else set())
    env = {"HF_TOKEN": "hf_wrong"} if case == "gated, wrong token" else {}
    with hub.running() as endpoint:
        done = fetch(opsctl, endpoint, path, **env)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.startswith("error: ") and expected in done.stderr.splitlines()[0]
    assert "hint:" in done.stderr and "Traceback" not in done.stderr
    assert "hf_wrong" not in done.stdout + done.stderr  # the token is never printed
    assert not weights.exists()


def _sibling(name: str, size: object = 3) -> Callable[[dict[str, Any]], object]:
    def tamper(listing: dict[str, Any]) -> object:
        listing["siblings"].append({"rfilename": name, "size": size})
        return listing
    return tamper


def _set(key: str, value: object) -> Callable[[dict[str, Any]], object]:
    return lambda listing: {**listing, key: value}


@pytest.mark.parametrize(("tamper", "expected"), [
    (_sibling("sub/../../escape.json"), "a file named 'sub/../../escape.json'"),
    (_sibling("/tmp/absolute.json"), "a file named '/tmp/absolute.json'"),
    (_sibling("a\0.json"), "a file named 'a\\x00.json'"),
    (_sibling("x\x1b]0;pwned\x07.json"), "a file named 'x\\x1b]0;pwned\\x07.json'"),
    (_sibling("z.json", "big"), "'z.json' with a size of 'big'"),
    (_sibling("z.json", -10**15), "with a size of '-1000000000000000'"),
    (_set("sha", None), "its commit is 'None'"),
    (_set("siblings", 5), "TypeError"),
    (lambda listing: b"<html>busy</html>", "JSONDecodeError"),
])
def test_a_listing_no_hub_sends_is_one_line_exit_7_before_anything_is_written(
        tamper: Callable[[dict[str, Any]], object], expected: str, tmp_path: Path,
        repos: dict[str, Repo], opsctl: OpsctlRunner) -> None:
    weights = tmp_path / "weights"
    with StubHub(repos, tamper=tamper).running() as endpoint:
        done = fetch(opsctl, endpoint, profile(tmp_path, weights, tmp_path / "mtp"))
    assert done.returncode == EXIT_HOST, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("error: http://127.0.0.1:") and expected in first, done.stderr
    assert "Traceback" not in done.stderr
    assert not weights.exists() and not (tmp_path / "escape.json").exists()


def test_what_a_checkpoint_says_reaches_the_terminal_without_its_control_characters(
        tmp_path: Path, repos: dict[str, Repo], opsctl: OpsctlRunner) -> None:
    config = repos[REPO].folder / "config.json"
    data = json.loads(config.read_text())
    data["architectures"] = ["Glm\x1b]0;pwned\x07MoeDsaForCausalLM"]
    config.write_text(json.dumps(data))
    with StubHub(repos).running() as endpoint:
        done = fetch(opsctl, endpoint, profile(tmp_path, tmp_path / "weights", tmp_path / "mtp"))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr
    assert "Glm\\x1b]0;pwned\\x07MoeDsaForCausalLM" in done.stdout


def test_a_gated_repository_is_fetched_with_the_token_the_profile_names(
        tmp_path: Path, repos: dict[str, Repo], opsctl: OpsctlRunner) -> None:
    weights = tmp_path / "weights"
    path = profile(tmp_path, weights, tmp_path / "mtp")
    data = yaml.safe_load(path.read_text())
    data["model"]["token_env"] = "MY_HUB_TOKEN"
    path.write_text(yaml.safe_dump(data))
    hub = StubHub(repos, gated={REPO})
    with hub.running() as endpoint:
        done = fetch(opsctl, endpoint, path, MY_HUB_TOKEN=hub.token)
    assert done.returncode == 0, done.stderr
    assert hub.token not in done.stdout + done.stderr


def test_an_unreachable_hub_is_exit_7_with_a_hint(tmp_path: Path, opsctl: OpsctlRunner,
                                                   free_port: object) -> None:
    path = profile(tmp_path, tmp_path / "weights", tmp_path / "mtp")
    port = free_port()  # type: ignore[operator]
    done = fetch(opsctl, f"http://127.0.0.1:{port}", path, HF_HUB_ETAG_TIMEOUT="2")
    assert done.returncode == EXIT_HOST, done.stderr
    assert done.stderr.startswith("error: cannot reach http://127.0.0.1:")
    assert "Traceback" not in done.stderr


def _small_disk(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, check=False)
    return mounted.returncode == 0


def test_too_little_disk_is_refused_before_downloading_and_a_full_disk_midway_resumes_later(
        tmp_path: Path, repos: dict[str, Repo], opsctl: OpsctlRunner) -> None:
    disk = tmp_path / "disk"
    if not _small_disk(disk, "2m"):
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    try:
        weights = disk / "weights"
        path = profile(tmp_path, weights, tmp_path / "mtp")
        shard = repos[REPO].folder / SHARD
        shard.write_bytes(os.urandom(3 << 20))  # more than the disk holds
        with StubHub(repos).running() as endpoint:
            refused = fetch(opsctl, endpoint, path)
        assert refused.returncode == EXIT_HOST, refused.stderr
        assert "needs" in refused.stderr and "is free" in refused.stderr, refused.stderr
        assert not any(disk.rglob("*.safetensors"))
        # It fits, but another writer fills the disk while the shard downloads:
        shard.write_bytes(os.urandom(1 << 20))
        filler = disk / "filler"
        filled: list[str] = []

        def fill(name: str) -> None:  # once: the next run finds the space freed
            if name == SHARD and not filled:
                filled.append(name)
                filler.write_bytes(b"\0" * ((2 << 20) - (512 << 10)))

        with StubHub(repos, before_file=fill).running() as endpoint:
            full = fetch(opsctl, endpoint, path)
            assert full.returncode == EXIT_HOST, full.stderr
            assert "filled up while downloading" in full.stderr, full.stderr
            assert not (weights / SHARD).exists()
            filler.unlink()
            again = fetch(opsctl, endpoint, path)
        assert again.returncode == 0, again.stderr
        assert (weights / SHARD).read_bytes() == shard.read_bytes()
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_ctrl_c_mid_download_is_exit_130_and_the_next_run_resumes(
        tmp_path: Path, repos: dict[str, Repo]) -> None:
    import signal
    import sys
    import time

    weights = tmp_path / "weights"
    path = profile(tmp_path, weights, tmp_path / "mtp")
    (repos[REPO].folder / SHARD).write_bytes(os.urandom(1 << 20))
    hub = StubHub(repos)
    with hub.running() as endpoint:
        env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf")}
        child = subprocess.Popen([sys.executable, "-m", "opsctl", "model", "fetch", "-p",
                                  str(path)], env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any(m == "HEAD" for m, _, _ in hub.requests) and time.monotonic() < deadline:
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
        assert child.returncode in (0, EXIT_INTERRUPTED), err
        assert "Traceback" not in err
        again = subprocess.run([sys.executable, "-m", "opsctl", "model", "fetch", "-p",
                                str(path)], env=env, capture_output=True, text=True,
                               timeout=120, stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stderr
    assert (weights / SHARD).read_bytes() == (repos[REPO].folder / SHARD).read_bytes()
