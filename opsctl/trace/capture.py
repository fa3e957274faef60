"""Driving sglang's profiler under load, and collecting the trace files it writes.

The request is the pinned release's (0.5.23 `ProfileReq`, a POST
/start_profile with a JSON body): `output_dir`, `num_steps`, `activities` (CPU, GPU). With
`num_steps` the scheduler stops by itself after that many forwards and writes one
`<id>-TP-<rank>.trace.json.gz` per rank into `output_dir` (a directory the server makes; when a
request names none it is `SGLANG_TORCH_PROFILER_DIR` from the launch environment, default
/tmp). The HTTP call returns at once; nothing says when the files are complete, so the
directory is polled until new trace files exist and their names and sizes stay the same over
two polls. If none appears in time, /stop_profile forces the export and the poll runs once more.

Each capture names its own fresh `output_dir`, so every trace file there is this capture's.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tarfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

import httpx

from opsctl.core.clock import Clock
from opsctl.core.errors import LaunchError
from opsctl.core.redact import redact_userinfo
from opsctl.engine.api import Engine
from opsctl.trace.chrome import TRACE_SUFFIXES

PROFILER_DIR_ENV = "SGLANG_TORCH_PROFILER_DIR"
DEFAULT_PROFILER_DIR = "/tmp"  # sglang's default for PROFILER_DIR_ENV
POLL_SECONDS = 1.0
STOP_WAIT_SECONDS = 60.0
MAX_ARCHIVE_BYTES = 2 << 30

Listing = dict[str, int]  # trace file name -> size


class TraceSource(Protocol):
    """Where the server's profiler output directory can be read from this host."""

    def describe(self) -> str: ...

    def listing(self) -> Listing: ...

    def fetch(self, names: list[str], dest: Path) -> list[Path]: ...


def _is_trace(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and not name.startswith(".")


@dataclass(frozen=True)
class LocalDir:
    """The output directory on this host (a local server, or a mount of the container's)."""

    path: Path

    def describe(self) -> str:
        return str(self.path)

    def listing(self) -> Listing:
        if not self.path.is_dir():
            return {}
        return {p.name: p.stat().st_size for p in self.path.iterdir()
                if p.is_file() and _is_trace(p.name)}

    def fetch(self, names: list[str], dest: Path) -> list[Path]:
        dest.mkdir(parents=True, exist_ok=True)
        return [Path(shutil.copyfile(self.path / name, dest / name)) for name in names]


@dataclass(frozen=True)
class ContainerDir:
    """The output directory inside a container, read through the engine (`docker cp`)."""

    engine: Engine
    container_id: str
    path: str

    def describe(self) -> str:
        return f"{self.container_id[:12]}:{self.path}"

    def _files(self) -> Iterator[tuple[str, tarfile.TarFile, tarfile.TarInfo]]:
        data = self.engine.archive(self.container_id, self.path, MAX_ARCHIVE_BYTES)
        if data is None:
            return
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                name = PurePosixPath(member.name).name
                # Only regular files directly in the directory: no links, no nested paths.
                if member.isfile() and len(PurePosixPath(member.name).parts) == 2 \
                        and _is_trace(name):
                    yield name, tar, member

    def listing(self) -> Listing:
        return {name: member.size for name, _, member in self._files()}

    def fetch(self, names: list[str], dest: Path) -> list[Path]:
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        for name, tar, member in self._files():
            handle = tar.extractfile(member)
            if name in names and handle is not None:
                target = dest / name
                target.write_bytes(handle.read())
                written.append(target)
        return written


@dataclass(frozen=True)
class ProfileAsk:
    """What /start_profile is asked for."""

    output_dir: str
    num_steps: int
    activities: tuple[str, ...] = ("CPU", "GPU")

    def body(self) -> dict[str, object]:
        return {"output_dir": self.output_dir, "num_steps": self.num_steps,
                "activities": list(self.activities)}


def post(client: httpx.Client, path: str, body: dict[str, object] | None = None) -> str:
    """POST an admin endpoint; LaunchError (exit 4) when the server is away or refuses."""
    try:
        response = client.post(path, json=body) if body is not None else client.post(path)
    except httpx.HTTPError as exc:
        raise LaunchError(f"{redact_userinfo(str(client.base_url))}{path}: {exc}",
                          hint="is the server up? `opsctl status` shows it") from None
    if response.status_code != 200:
        raise LaunchError(
            f"{path} answered {response.status_code}: {response.text.strip()[:200]}",
            hint="a profile may already be running: wait for it, or POST /stop_profile")
    return response.text.strip()


def await_traces(source: TraceSource, before: Listing, clock: Clock, wait_s: float) -> list[str]:
    """New trace files once their names and sizes hold still over two polls; [] at the deadline."""
    deadline = clock.monotonic() + wait_s
    last: Listing = {}
    while True:
        now = {name: size for name, size in source.listing().items() if before.get(name) != size}
        if now and now == last:
            return sorted(now)
        if clock.monotonic() >= deadline:
            return []
        last = now
        clock.sleep(POLL_SECONDS)


def stop_quietly(client: httpx.Client) -> None:
    """POST /stop_profile for a profile this run started and leaves early, ignoring the answer:
    one that ended by itself answers "not in progress". Without it the server kept profiling
    (the simulator counts steps only under load, which has stopped) and refused the next
    capture's /start_profile."""
    with contextlib.suppress(httpx.HTTPError):
        client.post("/stop_profile")


@dataclass(frozen=True)
class Profiled:
    files: list[Path]
    stopped_by_us: bool  # the profile did not stop by itself within the wait
    start_answer: str


def profile(client: httpx.Client, source: TraceSource, ask: ProfileAsk, dest: Path,
            clock: Clock, wait_s: float, hold: Callable[[], AbstractContextManager[object]]
            ) -> Profiled:
    """Start the profile while `hold()` keeps decode busy, wait for the files, fetch them."""
    before = source.listing()
    with hold():
        started = False
        try:
            answer = post(client, "/start_profile", ask.body())
            started = True
            names = await_traces(source, before, clock, wait_s)
        except BaseException as exc:  # Ctrl-C or a failure: the profile this run started stops
            # too (a Ctrl-C during /start_profile: the server may have started it already)
            if started or isinstance(exc, KeyboardInterrupt):
                stop_quietly(client)
            raise
        stopped = False
        if not names:
            post(client, "/stop_profile")
            stopped = True
            names = await_traces(source, before, clock, STOP_WAIT_SECONDS)
    if not names:
        raise LaunchError(
            f"no trace file appeared in {source.describe()} within {wait_s:g}s after "
            "/start_profile, nor after /stop_profile",
            hint="check the server log for 'Profiling'; did the load reach the server?")
    return Profiled(files=source.fetch(names, dest), stopped_by_us=stopped, start_answer=answer)
