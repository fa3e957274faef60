"""The one public dataset opsctl downloads itself (GSM8K's test split): fetched once into the
state directory, kept only when its sha256 is the pin, one line when it cannot be had. Served
here by httpx.MockTransport: the source cannot be reached from this machine."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from opsctl.config.datasets import GSM8K_TEST, PublicDataset
from opsctl.config.evalconfig import EvalConfig, Gsm8kConfig
from opsctl.core.errors import EXIT_HOST, HostNotReady, UsageError
from opsctl.traffic import smoke_evals
from opsctl.traffic.evals.dataset import load_gsm8k, public_file

LINES = "".join(json.dumps({"question": f"What is {n} + 1?", "answer": f"... #### {n + 1}"})
                + "\n" for n in range(8)).encode()
PINNED = PublicDataset(name="gsm8k-test.jsonl", url="https://source.example/o/r/abc/test.jsonl",
                       sha256=hashlib.sha256(LINES).hexdigest(), size=len(LINES),
                       source="a GSM8K-shaped test file")


def serving(body: bytes, seen: list[str] | None = None, status: int = 200) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(str(request.url))
        return httpx.Response(status, content=body)
    return httpx.MockTransport(answer)


def test_the_file_is_fetched_once_checked_and_kept(tmp_path: Path) -> None:
    seen: list[str] = []
    path = public_file(PINNED, tmp_path, serving(LINES, seen))
    assert path == tmp_path / PINNED.name and path.read_bytes() == LINES
    assert seen == [PINNED.url]
    refused = httpx.MockTransport(lambda request: pytest.fail("fetched again"))
    assert public_file(PINNED, tmp_path, refused) == path  # the pinned file is kept


@pytest.mark.parametrize(("body", "status", "says"), [
    (LINES + b"\n", 200, "is not the pin"),
    (b"", 404, "HTTP 404"),
    (LINES + b" " * 8192, 200, "more than the"),
])
def test_a_file_that_is_not_the_pin_is_refused_and_nothing_is_kept(
        tmp_path: Path, body: bytes, status: int, says: str) -> None:
    with pytest.raises(HostNotReady) as caught:
        public_file(PINNED, tmp_path, serving(body, status=status))
    assert says in caught.value.message and caught.value.exit_code == EXIT_HOST
    assert not list(tmp_path.iterdir())


def test_no_network_is_one_line_that_says_where_to_put_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSCTL_STATE_DIR", str(tmp_path / "state"))

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no route", request=request)

    with pytest.raises(HostNotReady) as caught:
        public_file(PINNED, transport=httpx.MockTransport(down))
    assert caught.value.message.startswith("cannot download a GSM8K-shaped test file from ")
    hint = caught.value.hint or ""
    assert str(tmp_path / "state" / "datasets" / PINNED.name) in hint and PINNED.sha256 in hint


def test_a_mirror_replaces_the_scheme_and_host(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSCTL_DATASETS_URL", "http://mirror.local:8080/raw/")
    seen: list[str] = []
    public_file(PINNED, tmp_path, serving(LINES, seen))
    assert seen == ["http://mirror.local:8080/raw/o/r/abc/test.jsonl"]


def test_the_pin_names_a_commit_not_a_branch() -> None:
    commit = GSM8K_TEST.url.split("/")[5]
    assert len(commit) == 40 and int(commit, 16) >= 0  # the URL cannot serve other bytes
    assert len(GSM8K_TEST.sha256) == 64


def test_a_profile_gsm8k_section_without_a_dataset_scores_the_pinned_test_split(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smoke_evals, "GSM8K_TEST", PINNED)
    monkeypatch.setattr(smoke_evals, "public_file",
                        lambda dataset: public_file(dataset, tmp_path, serving(LINES)))
    config = EvalConfig(gsm8k=Gsm8kConfig(threshold=0.9, questions=4, shots=2))
    plan = smoke_evals.plan_evals(smoke_evals.EvalRequest(gsm8k=True), config, load_gsm8k)
    assert plan.gsm8k is not None and plan.gsm8k.dataset.sha256 == PINNED.sha256
    assert plan.gsm8k.questions == 4 and len(plan.gsm8k.dataset.items) == 8


def test_a_dataset_without_its_pin_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match="dataset and sha256 go together"):
        Gsm8kConfig(dataset="my.jsonl", threshold=0.9)


def test_a_source_that_drips_the_file_is_cut_off_at_the_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opsctl.traffic.evals import dataset

    clock = [0.0]
    monkeypatch.setattr(dataset.time, "monotonic", lambda: clock[0])

    def drip() -> Iterator[bytes]:  # the right file, one byte a second (each read in time)
        for byte in LINES:
            clock[0] += 1.0
            yield bytes([byte])

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=drip()))
    with pytest.raises(HostNotReady) as caught:
        public_file(PINNED, tmp_path, transport)
    assert f"in {dataset.FETCH_TIMEOUT_S:.0f} s" in caught.value.message
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("mirror", ["http://[::1", "http://x\n/", "garbage", "file:///etc"])
def test_a_mirror_that_is_not_an_http_url_is_one_line_naming_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mirror: str) -> None:
    monkeypatch.setenv("OPSCTL_DATASETS_URL", mirror)
    refused = httpx.MockTransport(lambda request: pytest.fail("fetched"))
    with pytest.raises(UsageError) as caught:
        public_file(PINNED, tmp_path, refused)
    assert caught.value.message.startswith("$OPSCTL_DATASETS_URL is ")
    assert "\n" not in caught.value.message
