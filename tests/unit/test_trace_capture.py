"""`trace capture` with fakes: the profiler requests, the polling, the sources, the simulator's
synthetic trace and the knobs `tune` uses (the simulator process: tests/component)."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from fakes import FakeClock, FakeEngine

from opsctl.core.errors import LaunchError
from opsctl.sim.profiler import synthetic_trace
from opsctl.trace import capture as cap
from opsctl.trace import chrome, signatures
from opsctl.trace.analyze import analyze
from opsctl.trace.app import server_trace_dir
from opsctl.trace.load import LoadSummary


class GrowingDir:
    """A TraceSource whose files appear (and grow) one poll at a time."""

    def __init__(self, listings: list[cap.Listing]) -> None:
        self.listings = listings
        self.polls = 0

    def describe(self) -> str:
        return "fake"

    def listing(self) -> cap.Listing:
        self.polls += 1
        return self.listings[min(self.polls - 1, len(self.listings) - 1)]

    def fetch(self, names: list[str], dest: Path) -> list[Path]:
        dest.mkdir(parents=True, exist_ok=True)
        return [dest / name for name in names]


def recording_client(seen: list[tuple[str, object]], status: int = 200) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content) if request.content else None))
        return httpx.Response(status, text="Start profiling.\n" if status == 200 else "boom")

    return httpx.Client(base_url="http://server", transport=httpx.MockTransport(answer))


@contextmanager
def no_load() -> Iterator[LoadSummary]:
    yield LoadSummary(concurrency=1)


def test_waits_until_the_files_hold_still(tmp_path: Path) -> None:
    source = GrowingDir([{}, {"a-TP-0.trace.json.gz": 10}, {"a-TP-0.trace.json.gz": 20,
                         "a-TP-1.trace.json.gz": 5}, {"a-TP-0.trace.json.gz": 20,
                                                      "a-TP-1.trace.json.gz": 5}])
    seen: list[tuple[str, object]] = []
    ask = cap.ProfileAsk(output_dir="/tmp/opsctl-trace-x", num_steps=3)
    done = cap.profile(recording_client(seen), source, ask, tmp_path, FakeClock(), 60, no_load)
    assert [p.name for p in done.files] == ["a-TP-0.trace.json.gz", "a-TP-1.trace.json.gz"]
    assert seen == [("/start_profile", {"output_dir": "/tmp/opsctl-trace-x", "num_steps": 3,
                                        "activities": ["CPU", "GPU"]})]
    assert not done.stopped_by_us


def test_stop_profile_when_nothing_comes(tmp_path: Path) -> None:
    seen: list[tuple[str, object]] = []
    clock = FakeClock()
    with pytest.raises(LaunchError, match="no trace file appeared"):
        cap.profile(recording_client(seen), GrowingDir([{}]), cap.ProfileAsk("/d", 3), tmp_path,
                    clock, 10, no_load)
    assert [path for path, _ in seen] == ["/start_profile", "/stop_profile"]
    assert clock.time - 1000.0 >= 10 + cap.STOP_WAIT_SECONDS


def test_a_refused_profile_is_a_launch_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="answered 500: boom"):
        cap.profile(recording_client([], status=500), GrowingDir([{}]), cap.ProfileAsk("/d", 3),
                    tmp_path, FakeClock(), 10, no_load)


def test_ctrl_c_while_waiting_stops_the_profile_it_started(tmp_path: Path) -> None:
    """Issue 25 item 5: a Ctrl-C after /start_profile left the server profiling (the simulator
    counts steps only under load, which the Ctrl-C ends) and it refused the next capture."""
    seen: list[tuple[str, object]] = []

    class Interrupting(GrowingDir):
        def listing(self) -> cap.Listing:
            if self.polls:
                raise KeyboardInterrupt
            return super().listing()

    with pytest.raises(KeyboardInterrupt):
        cap.profile(recording_client(seen), Interrupting([{}]), cap.ProfileAsk("/d", 3), tmp_path,
                    FakeClock(), 10, no_load)
    assert [path for path, _ in seen] == ["/start_profile", "/stop_profile"]


def tar_of(files: dict[str, bytes], link: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return buffer.getvalue()


def test_container_dir_reads_through_the_engine(tmp_path: Path) -> None:
    engine = FakeEngine()
    engine.archives[("c1", "/tmp/t")] = tar_of(
        {"t/x-TP-0.trace.json.gz": b"one", "t/sub/deep.trace.json.gz": b"no", "t/notes.txt": b"no"},
        link="t/evil.trace.json.gz")
    source = cap.ContainerDir(engine, "c1", "/tmp/t")
    assert source.listing() == {"x-TP-0.trace.json.gz": 3}
    (path,) = source.fetch(["x-TP-0.trace.json.gz"], tmp_path / "out")
    assert path.read_bytes() == b"one"
    assert cap.ContainerDir(engine, "c1", "/elsewhere").listing() == {}


def test_server_trace_dir_follows_the_launch_env() -> None:
    assert server_trace_dir({}).startswith("/tmp/opsctl-trace-")
    assert server_trace_dir({cap.PROFILER_DIR_ENV: "/traces/"}).startswith("/traces/opsctl-trace-")


def test_synthetic_trace_carries_the_configured_signature(tmp_path: Path) -> None:
    for casts, expected in ((True, "full_pool_kv_cast"), (False, "gather_then_cast")):
        doc = synthetic_trace([(4, 30000.0, True)] * 3, casts=casts, annotate=True)
        path = chrome.write_gz(doc, tmp_path / f"{casts}.json.gz")
        found = analyze(chrome.load(path))
        found_names = [f.signature for f in signatures.judge(found)]
        assert expected in found_names and found.steps == 3
        assert ("full_pool_kv_cast" in found_names) == casts
    eager = analyze(chrome.load(chrome.write_gz(
        synthetic_trace([(8, 30000.0, False)] * 2, casts=False, annotate=False),
        tmp_path / "eager.json.gz")))
    assert eager.step_rule == "whole-trace" and eager.host_launches > 0


def test_sim_knobs_for_tune() -> None:
    from opsctl.sim.config import EAGER_ITL_FACTOR, Behaviour, SimArgs

    args = SimArgs.parse(["--model-path", "/m", "--cuda-graph-max-bs-decode", "2",
                          "--mem-fraction-static", "0.95"])
    assert args.cuda_graph_max_bs == 2 and args.oom_at_start()
    assert not SimArgs.parse(["--model-path", "/m", "--mem-fraction-static", "0.9"]).oom_at_start()
    behaviour = Behaviour(itl_ms=20.0)
    assert behaviour.itl_seconds(2, 2) == pytest.approx(0.02)
    assert behaviour.itl_seconds(3, 2) == pytest.approx(0.02 * EAGER_ITL_FACTOR)
    assert behaviour.itl_seconds(3) == pytest.approx(0.02)
    assert behaviour.updated({"trace_cast": "off"}).trace_cast == "off"
    with pytest.raises(ValueError, match="trace_cast"):
        behaviour.updated({"trace_cast": "maybe"})
