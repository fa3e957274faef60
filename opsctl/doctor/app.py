"""`opsctl doctor`: is this host ready for the profile? One row per check, pass / warn / fail.

The checks, in order: Docker (reachable, its version); GPUs from a container (`nvidia-smi -L`
in a throwaway container of a local image given every GPU, as `docker run --gpus all`; never a
pull); the host's GPUs against the profile (count, model, compute capability, memory, from
`nvidia-smi`); the host driver against the CUDA of each base image (image/basecheck.py, NVIDIA's
table); P2P, IOMMU and ACS (deploy/hostcheck.py, `opsctl host p2p`); the checkpoint's files
(deploy/preflight_probe.py's own checks, run on the host folder: config.json, the tokenizer
files, the safetensors index and shards, the NextN weights when a variant drafts with MTP; the
image's transformers and sglang loading it stay `up`'s preflight); disk free for Docker's data
root and `out/`; /dev/shm against the profile's `shm_size`; the port; each base image present
and matching its lock (image/build.resolve_base, image/lock.check_lock).

Every collaborator is passed in (`Tools`): the engine's connector, a command runner that takes a
timeout, the clock and the host's files, sockets and filesystems. Every call is bounded: the
engine by its client timeout, tools by TOOL_TIMEOUT_S, the GPU container by GPU_RUN_TIMEOUT_S,
and no check starts once BUDGET_S has passed since the first (it is reported as not run), so the
command ends within 60 s. Without nvidia-smi (the simulator's host) the GPU rows fail with one
line, "no GPU (nvidia-smi not found)"; the exit code is the CLI's (opsctl/cli/doctor.py).
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from opsctl.config import resolve
from opsctl.config.profile_checks import size_bytes
from opsctl.config.profiles import Deployment, Profile, to_argv
from opsctl.core import labels
from opsctl.core.clock import Clock
from opsctl.core.errors import DaemonUnreachable, OpsctlError, stop_reason
from opsctl.core.failures import as_opsctl_error
from opsctl.core.files import read_bounded
from opsctl.core.reports import REPORTS_DIR
from opsctl.core.tools import last_line
from opsctl.deploy import hostcheck, preflight, preflight_probe
from opsctl.doctor.checks import (
    DOCKER_DEFAULT_SHM,
    FAIL,
    GPU_QUERY,
    IMAGES_MIN_FREE,
    NO_GPU,
    OUT_MIN_FREE,
    PASS,
    WARN,
    Check,
    Gpu,
    gib,
    judge_capability,
    judge_count,
    judge_free,
    judge_memory,
    judge_model,
    listed_gpus,
    mem_total,
    parse_gpus,
)
from opsctl.engine.api import BuildEvent, Engine, EngineInfo
from opsctl.image import basecheck, lock
from opsctl.image.build import resolve_base
from opsctl.image.plan import BuildPlan, expected_image, plans

LIMIT_S = 60.0  # the bound on the whole command
BUDGET_S = 50.0  # no check starts after this; the slowest bounded call then ends within 60 s
TOOL_TIMEOUT_S = 10.0  # each nvidia-smi / lspci run
GPU_RUN_TIMEOUT_S = 20.0  # the throwaway GPU container
MAX_HOST_FILE_BYTES = 1 << 20  # /proc/meminfo, /proc/cmdline: a few kB
DETAIL_CHARS = 400  # a failed check's row quotes at most this much of its error
GPU_FIX = ("install the NVIDIA driver and the NVIDIA Container Toolkit, then `nvidia-ctk runtime "
           "configure --runtime=docker` (or CDI: `nvidia-ctk cdi generate --output=/etc/cdi/"
           "nvidia.yaml`) and restart dockerd")

TimedRun = Callable[[list[str], float], tuple[int, str]]  # argv, timeout -> (exit code, output)


# --- the host, as Host's defaults read it -----------------------------------------------------


def _disk_usage(path: str) -> tuple[int, int]:
    usage = shutil.disk_usage(path)
    return usage.total, usage.free


def _read(path: Path) -> str:
    """A small host file (/proc/meminfo, /proc/cmdline), read under a cap; "" when unreadable."""
    try:
        return read_bounded(path, "host file", MAX_HOST_FILE_BYTES).decode(errors="replace")
    except (OSError, OpsctlError):
        return ""


def _count(path: Path) -> int:
    try:
        return sum(1 for _ in path.iterdir())
    except OSError:
        return 0


def _port_problem(address: str, port: int) -> str | None:
    """None when `address:port` can be bound now, else why not (the listener is not named)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "taken"
        try:
            probe.bind((address, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


@dataclass(frozen=True)
class Host:
    """The host as doctor reads it; tests replace any part."""

    which: Callable[[str], str | None] = shutil.which
    disk_usage: Callable[[str], tuple[int, int]] = _disk_usage
    read_text: Callable[[Path], str] = _read
    count_entries: Callable[[Path], int] = _count
    port_problem: Callable[[str, int], str | None] = _port_problem
    is_dir: Callable[[Path], bool] = Path.is_dir


@dataclass(frozen=True)
class Tools:
    connect: Callable[[], Engine]  # raises DaemonUnreachable (reported as a failed row)
    run: TimedRun
    clock: Clock
    host: Host = field(default_factory=Host)


@dataclass(frozen=True)
class DoctorRequest:
    profile: Profile
    checkpoint: Path | None = None  # instead of the profile's model.host_path
    gpu_count: int | None = None  # GPUs expected (default: the profile's, as `profile resolve`)


@dataclass(frozen=True)
class DoctorReport:
    profile: str
    started_at: datetime
    seconds: float
    checks: list[Check]
    partial_reason: str | None = None  # Ctrl-C stopped it: the checks after it were not run

    @property
    def failed(self) -> list[Check]:
        return [check for check in self.checks if check.status == FAIL]

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "started_at": self.started_at.isoformat(),
                "seconds": round(self.seconds, 3), "ok": not self.failed,
                "counts": {status: sum(c.status == status for c in self.checks)
                           for status in (PASS, WARN, FAIL)},
                "partial": self.partial_reason is not None, "partial_reason": self.partial_reason,
                "checks": [{"name": c.name, "status": c.status, "detail": c.detail, "fix": c.fix}
                           for c in self.checks]}


class _Unavailable(Exception):
    """A check needs what an earlier one found missing (Docker, nvidia-smi)."""

    def __init__(self, detail: str, fix: str = "") -> None:
        super().__init__(detail)
        self.detail, self.fix = detail, fix


class _Session:
    """What the checks share: the engine (connected once; dead after it stops answering), the
    host's GPUs (queried once) and the time budget."""

    def __init__(self, request: DoctorRequest, tools: Tools) -> None:
        self.request, self.tools = request, tools
        self.profile = request.profile
        self.deployment: Deployment = request.profile.resolve(None)
        self.deadline = tools.clock.monotonic() + BUDGET_S
        self._engine: Engine | None = None
        self._engine_down: OpsctlError | None = None
        self._gpus: list[Gpu] | None = None
        self._gpu_problem: _Unavailable | None = None
        self.engine_info: EngineInfo | None = None

    # --- shared collaborators ---

    def left(self, cap: float) -> float:
        """`cap` seconds, or what is left of the 60 s when less (at least 1 s)."""
        return max(
            1.0, min(cap, self.deadline + (LIMIT_S - BUDGET_S) - self.tools.clock.monotonic())
        )

    def run(self, argv: list[str]) -> tuple[int, str]:
        return self.tools.run(argv, self.left(TOOL_TIMEOUT_S))

    def engine(self) -> Engine:
        if self._engine_down is not None:
            raise _Unavailable(f"not checked: {self._engine_down.message}", "see the docker row")
        if self._engine is None:
            try:
                self._engine = self.tools.connect()
            except DaemonUnreachable as exc:
                self._engine_down = exc
                raise
        return self._engine

    def engine_down(self, exc: OpsctlError) -> None:
        self._engine_down = exc

    def gpus(self) -> list[Gpu]:
        if self._gpu_problem is not None:
            raise self._gpu_problem
        if self._gpus is None:
            try:
                self._gpus = self._query_gpus()
            except _Unavailable as problem:
                self._gpu_problem = problem
                raise
        return self._gpus

    def _query_gpus(self) -> list[Gpu]:
        smi = self.tools.host.which("nvidia-smi")
        if smi is None:
            raise _Unavailable(NO_GPU, "run doctor on the GPU host, where the NVIDIA driver "
                               "installs nvidia-smi")
        code, output = self.run([smi, *GPU_QUERY])
        if code != 0:
            raise _Unavailable(f"nvidia-smi failed (exit {code}): {last_line(output)}",
                               "check the driver with `nvidia-smi`")
        try:
            gpus = parse_gpus(output)
        except ValueError as exc:
            raise _Unavailable(f"the GPU count is unknown: {exc}",
                               "check `nvidia-smi --query-gpu=index,name --format=csv`") from None
        if not gpus:
            raise _Unavailable("nvidia-smi lists no GPU", "check the driver with `nvidia-smi`")
        return gpus

    def driver(self) -> str | None:
        try:
            return self.gpus()[0].driver
        except _Unavailable:
            return None

    # --- the checks, in the table's order ---

    def docker(self) -> list[Check]:
        info = self.engine().info()
        self.engine_info = info
        default = f", default {info.default_runtime}" if info.default_runtime else ""
        return [Check("docker", PASS, f"Docker {info.version} (API {info.api_version}); "
                      f"runtimes {', '.join(info.runtimes) or 'none'}{default}")]

    def gpu_container(self) -> list[Check]:
        name = "GPUs in a container"
        self.gpus()  # without the host's GPUs no container can get one: one line, no run
        engine = self.engine()
        image = next(
            (ref for ref in self._local_images() if engine.image_id(ref) is not None), None
        )
        if image is None:
            return [Check(name, FAIL, "no local image to run nvidia-smi in (doctor never pulls)",
                          "`opsctl build` (or `opsctl base-image`) first")]
        code, output = engine.run_to_completion(image, ["nvidia-smi", "-L"], gpus=True,
                                                timeout_seconds=self.left(GPU_RUN_TIMEOUT_S))
        listed = listed_gpus(output)
        last = last_line(output)
        if code == 0 and listed:
            return [Check(name, PASS, f"nvidia-smi in a throwaway container of {image} lists "
                          f"{listed} GPU(s){self._mechanism()}")]
        if code == 125:
            return [Check(name, FAIL, f"the engine gives no GPU to a container: {last}", GPU_FIX)]
        if code == 124:
            return [Check(name, FAIL, f"nvidia-smi in {image} did not answer within "
                          f"{GPU_RUN_TIMEOUT_S:g} s", "check `nvidia-smi` on the host")]
        return [Check(name, FAIL, f"nvidia-smi in a container of {image} exited {code}: {last}",
                      GPU_FIX)]

    def _mechanism(self) -> str:
        info = self.engine_info
        if info is None:
            return ""
        parts = []
        if "nvidia" in info.runtimes:
            parts.append("the nvidia runtime is registered")
        if info.cdi_spec_dirs:
            parts.append(f"CDI specs in {', '.join(info.cdi_spec_dirs)}")
        return f" ({'; '.join(parts)})" if parts else ""

    def _local_images(self) -> Iterator[str]:
        seen: set[str] = set()
        for variant in self.profile.variants:
            for ref in (expected_image(self.profile.resolve(variant)),
                        self.profile.variant_image(variant).base):
                if ref not in seen:
                    seen.add(ref)
                    yield ref

    def host_gpus(self) -> list[Check]:
        try:
            gpus = self.gpus()
        except _Unavailable as problem:
            return [Check(name, FAIL, problem.detail, problem.fix) for name in
                    ("GPU count", "GPU model", "GPU compute capability", "GPU memory")]
        target = resolve.gpu_report(self.deployment, count=self.request.gpu_count)
        indices = [] if self.request.gpu_count else list(self.profile.container.gpus)
        return [judge_count(gpus, indices, target.count), judge_model(gpus, target.name),
                judge_capability(gpus, target.capability), judge_memory(gpus, target.memory_gb)]

    def drivers(self) -> list[Check]:
        driver = self.driver()
        checks = []
        for base in dict.fromkeys(
            self.profile.variant_image(v).base for v in self.profile.variants
        ):
            name = f"driver for {base}"
            env = self.engine().image_env(base)
            if env is None:
                checks.append(Check(name, WARN, "base absent: its CUDA is not read",
                                    "see its base image row"))
                continue
            note = basecheck.driver_note(base, env, driver)
            cuda = env.get(basecheck.CUDA_VERSION_ENV)
            if note is None:
                checks.append(Check(name, PASS, f"CUDA {cuda}; host driver {driver}" if cuda else
                                    "not a CUDA image (CUDA_VERSION unset): it asks no driver"))
            elif note.warning or driver is None:
                checks.append(Check(name, FAIL, NO_GPU if driver is None else note.text,
                                    "install an NVIDIA driver the base's CUDA supports "
                                    f"({basecheck.COMPATIBILITY_TABLE})"))
            else:
                checks.append(Check(name, WARN, note.text))
        return checks

    def p2p(self) -> list[Check]:
        name = "P2P, IOMMU, ACS"
        found = hostcheck.check_p2p(which=self.tools.host.which, run=self.run,
                                    read=self.tools.host.read_text,
                                    count=self.tools.host.count_entries)
        verdict = found.verdict
        detail = f"{len(found.gpus)} GPU(s), {found.acs.note}; " + "; ".join(verdict.reasons)
        if f"IOMMU {found.iommu.mode}" not in detail:
            detail += f"; IOMMU {found.iommu.mode}"
        level = self.profile.container.nccl_p2p_level
        if level == "SYS" and verdict.sys_advisable is not True:
            return [Check(name, FAIL, detail, "container.nccl_p2p_level: SYS is not advisable "
                          "here: set it to null (NCCL decides)")]
        if verdict.sys_advisable is None:
            return [Check(name, WARN, detail, "run `opsctl host p2p` as root to read ACS")]
        return [Check(name, PASS, detail)]

    def checkpoint(self) -> list[Check]:
        folder = self.request.checkpoint or self.profile.model.host_path
        if folder is None:
            return [Check("checkpoint", PASS, "none needed: the profile mounts no checkpoint "
                          "(model.host_path unset)")]
        path = Path(str(folder))
        if not self.tools.host.is_dir(path):
            return [
                Check(
                    "checkpoint",
                    FAIL,
                    f"checkpoint folder {path} does not exist on this host",
                    "`opsctl model fetch` downloads them there, or fix model.host_path",
                )
            ]
        report = preflight_probe.Report()
        config = preflight_probe.check_config(report, path)
        preflight_probe.check_tokenizer_files(report, path)
        weight_map = preflight_probe.check_shards(report, path)
        mtp = [
            v for v in self.profile.variants if preflight.is_mtp(to_argv(self.profile.resolve(v)))
        ]
        if mtp:
            preflight_probe.check_nextn(report, config, weight_map)
        fix = f"check the checkpoint in {path} (a partial download?)"
        return [Check(f"checkpoint {r['check']}" + (f" ({', '.join(mtp)})" if "NextN" in r["check"]
                                                    else ""),
                      PASS if r["ok"] else FAIL, r["detail"], "" if r["ok"] else fix)
                for r in report.results]

    def disks(self) -> list[Check]:
        checks = []
        info = self.engine_info
        root = info.root_dir if info else ""
        if not root:
            checks.append(Check("disk (images)", WARN, "Docker's data root is unknown (see the "
                                "docker row): not measured"))
        elif not self.tools.host.is_dir(Path(root)):
            checks.append(Check("disk (images)", WARN, f"Docker's data root {root} is not on this "
                                "host (DOCKER_HOST elsewhere?): not measured"))
        else:
            checks.append(judge_free("disk (images)", root, *self.tools.host.disk_usage(root),
                                     IMAGES_MIN_FREE))
        out = existing_dir(REPORTS_DIR.absolute(), self.tools.host.is_dir)
        checks.append(judge_free("disk (out/)", str(out), *self.tools.host.disk_usage(str(out)),
                                 OUT_MIN_FREE))
        return checks

    def shm(self) -> list[Check]:
        container = self.profile.container
        name = "/dev/shm"
        if container.ipc_host:
            if not self.tools.host.is_dir(Path("/dev/shm")):
                return [Check(name, FAIL, "ipc_host: the container shares the host's /dev/shm, "
                              "which this host lacks", "mount a tmpfs at /dev/shm")]
            total, free = self.tools.host.disk_usage("/dev/shm")
            wanted = size_bytes(container.shm_size) if container.shm_size else 0
            detail = (f"ipc_host: the container shares the host's /dev/shm, {gib(free)} free of "
                      f"{gib(total)}")
            if free < wanted:
                return [Check(name, WARN, detail + f", less than shm_size {container.shm_size}",
                              "free /dev/shm, or remount it larger")]
            return [Check(name, PASS, detail)]
        wanted = size_bytes(container.shm_size) if container.shm_size else DOCKER_DEFAULT_SHM
        shown = container.shm_size or "unset (Docker's 64m)"
        memory = mem_total(self.tools.host.read_text(Path("/proc/meminfo")))
        if memory is not None and wanted > memory:
            return [Check(name, FAIL, f"shm_size {shown}: more than this host's memory "
                          f"({gib(memory)}); /dev/shm is memory-backed",
                          "lower container.shm_size")]
        known = f"; this host has {gib(memory)} of memory" if memory is not None else ""
        return [Check(name, PASS, f"shm_size {shown}: a private /dev/shm of {gib(wanted)}{known}")]

    def port(self) -> list[Check]:
        container = self.profile.container
        address, port = container.publish_address, container.host_port
        name = f"port {address}:{port}"
        problem = self.tools.host.port_problem(address, port)
        if problem is None:
            return [Check(name, PASS, "free")]
        try:
            ours = [c for c in self.engine().find({labels.ROLE: labels.ROLE_SERVER})
                    if any(p.host_port == port for p in c.ports)]
        except _Unavailable:
            ours = []
            problem += " (whether opsctl's own server holds it was not checked: no Docker)"
        if ours:
            return [Check(name, PASS, f"held by opsctl's own server {ours[0].name} "
                          f"(profile {ours[0].labels.get(labels.PROFILE, '?')})",
                          "`opsctl up` replaces it; `opsctl down` frees the port")]
        return [Check(name, FAIL, f"taken: {problem}",
                      "stop what listens there, or change container.host_port in the profile")]

    def bases(self) -> list[Check]:
        checks = []
        for plan in plans(self.profile):
            checks.append(self._base(plan))
        return checks

    def _base(self, plan: BuildPlan) -> Check:
        name = f"base {plan.base_image}"
        engine = self.engine()
        try:
            base = resolve_base(engine, plan.base_image, plan.sglang_version)
        except OpsctlError as exc:
            return Check(name, FAIL, exc.message, exc.hint)
        locked = lock.read_lock(plan.lock_path).get(plan.base_image)
        if locked is None:
            return Check(name, WARN, f"present ({base.digest[:19]}), not locked yet",
                         f"the first `opsctl build` records it in {plan.lock_path.name}")
        events: list[BuildEvent] = []
        try:
            lock.check_lock(plan.lock_path, base, False, engine.image_labels(base.from_ref) or {},
                            events.append)
        except OpsctlError as exc:
            return Check(name, FAIL, exc.message, exc.hint)
        if events:
            return Check(name, WARN, events[0].text.removeprefix("WARNING: "),
                         "`opsctl build` re-locks it")
        return Check(name, PASS, f"present, matches its lock ({base.digest[:19]})")


# (the row's name when the check cannot start, the check)
_ORDER: tuple[tuple[str, Callable[[_Session], list[Check]]], ...] = (
    ("docker", _Session.docker),
    ("GPUs in a container", _Session.gpu_container),
    ("GPUs", _Session.host_gpus),
    ("driver", _Session.drivers),
    ("P2P, IOMMU, ACS", _Session.p2p),
    ("checkpoint", _Session.checkpoint),
    ("disk", _Session.disks),
    ("/dev/shm", _Session.shm),
    ("port", _Session.port),
    ("base images", _Session.bases),
)


def doctor(request: DoctorRequest, tools: Tools) -> DoctorReport:
    """Every check, in order; a failing one is a row, never an exception (a bug still raises)."""
    started, began = tools.clock.now(), tools.clock.monotonic()
    session = _Session(request, tools)
    checks: list[Check] = []
    stopped: str | None = None
    for name, check in _ORDER:
        if stopped is not None:
            checks.append(Check(name, WARN, f"not run: {stopped}", "run doctor again"))
            continue
        if tools.clock.monotonic() >= session.deadline:
            checks.append(Check(name, WARN, f"not run: the {BUDGET_S:g} s budget was spent",
                                "run doctor again once the slow check above is fixed"))
            continue
        try:
            checks.extend(_guarded(session, name, check))
        except KeyboardInterrupt as exc:  # the rows so far are the partial report
            stopped = stop_reason(exc)
            checks.append(Check(name, WARN, f"not run: {stopped}", "run doctor again"))
    return DoctorReport(profile=request.profile.name, started_at=started,
                        seconds=tools.clock.monotonic() - began, checks=checks,
                        partial_reason=stopped)


def _guarded(session: _Session, name: str, check: Callable[[_Session], list[Check]]) -> list[Check]:
    try:
        return check(session)
    except _Unavailable as problem:
        return [Check(name, FAIL, problem.detail, problem.fix)]
    except Exception as exc:  # noqa: BLE001 - a user's or a peer's failure is a row; a bug re-raises
        error = as_opsctl_error(exc)
        if error is None:
            raise
        if isinstance(error, DaemonUnreachable):
            session.engine_down(error)
        return [Check(name, FAIL, last_line(" ".join(error.message.split()), DETAIL_CHARS),
                      error.hint)]


def existing_dir(path: Path, is_dir: Callable[[Path], bool]) -> Path:
    while not is_dir(path) and path != path.parent:
        path = path.parent
    return path
