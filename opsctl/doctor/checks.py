"""`opsctl doctor`'s pieces that need no engine, no host and no clock: the result row, what
`nvidia-smi` answers, and how a GPU, a disk or a shared-memory size is judged.

Figures that are policy, with their source:
  - disk: Kubernetes' kubelet evicts below `imagefs.available<15%` (the filesystem holding
    images) and `nodefs.available<10%` (the node's own), its default hard eviction thresholds
    ("Node-pressure Eviction", kubernetes.io); doctor fails at the same fractions for Docker's
    data root and for `out/`;
  - /dev/shm: Docker gives a container a private 64 MiB /dev/shm unless `--shm-size` says
    otherwise (`docker run` reference), sized in powers of 1024;
  - a GPU's memory: nvidia-smi reports `memory.total` in MiB, less than the card's marketed
    size (the driver keeps part), so it is compared with the profile's GiB after rounding to
    the nearest GiB; a smaller card is a warning (the model and compute capability decide).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

PASS, WARN, FAIL = "pass", "warn", "fail"
STATUSES = (PASS, WARN, FAIL)
IMAGES_MIN_FREE = 0.15  # kubelet's imagefs.available default hard eviction threshold
OUT_MIN_FREE = 0.10  # kubelet's nodefs.available default hard eviction threshold
DOCKER_DEFAULT_SHM = 64 * 2**20  # `docker run` without --shm-size
GPU_QUERY = ["--query-gpu=index,name,compute_cap,memory.total,driver_version",
             "--format=csv,noheader,nounits"]
NO_GPU = "no GPU (nvidia-smi not found)"
_LISTED_GPU = re.compile(r"^GPU \d+:", re.M)  # a line of `nvidia-smi -L`
_CAPABILITY = re.compile(r"^(\d+)\.(\d+)$")


@dataclass(frozen=True)
class Check:
    """One row of the table: what was checked, pass / warn / fail, what was found, the fix."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")


@dataclass(frozen=True)
class Gpu:
    """One row of `nvidia-smi --query-gpu=...` (GPU_QUERY)."""

    index: int
    name: str
    capability: tuple[int, int] | None  # None: "[N/A]" (a driver too old to report it)
    memory_mib: int | None
    driver: str


def parse_gpus(text: str) -> list[Gpu]:
    """The GPUs of a GPU_QUERY answer; ValueError naming the first line that is not one (a
    field past csv's limit, a number past int's digit limit included)."""
    try:
        return _parse_gpus(text)
    except csv.Error as exc:
        raise ValueError(f"unexpected nvidia-smi output ({exc})") from None


def _parse_gpus(text: str) -> list[Gpu]:
    gpus = []
    for row in csv.reader(text.strip().splitlines(), skipinitialspace=True):
        if not row:
            continue
        if len(row) != 5 or not row[0].strip().isdigit():
            raise ValueError(f"unexpected nvidia-smi line {', '.join(row)[:120]!r}")
        index, name, capability, memory, driver = (cell.strip() for cell in row)
        found = _CAPABILITY.match(capability)
        gpus.append(Gpu(index=int(index), name=name,
                        capability=(int(found[1]), int(found[2])) if found else None,
                        memory_mib=int(memory) if memory.isdigit() else None, driver=driver))
    return gpus


def listed_gpus(text: str) -> int:
    """How many GPUs `nvidia-smi -L` lists."""
    return len(_LISTED_GPU.findall(text))


def capability_text(capability: tuple[int, int] | None) -> str:
    return "unknown" if capability is None else f"{capability[0]}.{capability[1]}"


def gib(count: float) -> str:
    return f"{count / 2**30:.1f} GiB"


def judge_count(gpus: list[Gpu], indices: list[int], count: int) -> Check:
    """The profile's GPUs (its exact indices, else `count` of them) are all there."""
    found = sorted(gpu.index for gpu in gpus)
    if indices:
        missing = [index for index in indices if index not in found]
        if missing:
            return Check("GPU count", FAIL, f"{len(found)} GPU(s) here; the profile uses indices "
                         f"{indices}, {missing} absent",
                         "run on the 8-GPU host, or set container.gpus to GPUs this host has")
        return Check("GPU count", PASS, f"{len(found)} GPU(s); the profile uses {indices}")
    if len(found) < count:
        return Check("GPU count", FAIL, f"{len(found)} GPU(s) here; the profile needs {count}",
                     "run on a host with that many GPUs")
    return Check("GPU count", PASS, f"{len(found)} GPU(s); the profile needs {count}")


def judge_model(gpus: list[Gpu], target: str) -> Check:
    other = sorted({gpu.name for gpu in gpus if target.lower() not in gpu.name.lower()})
    if other:
        return Check("GPU model", FAIL, f"{', '.join(other)}, not the profile's {target}",
                     "the profile's flags and kernels are for its target GPU: run on that host")
    return Check("GPU model", PASS, f"{gpus[0].name} x{len(gpus)}")


def judge_capability(gpus: list[Gpu], target: tuple[int, int]) -> Check:
    other = sorted({capability_text(gpu.capability) for gpu in gpus if gpu.capability != target})
    if other:
        return Check("GPU compute capability", FAIL, f"{', '.join(other)}, not the profile's "
                     f"{capability_text(target)} (its JIT arch lists target it)",
                     "run on the profile's target GPU; an unknown one needs a newer driver")
    return Check("GPU compute capability", PASS, capability_text(target))


def judge_memory(gpus: list[Gpu], target_gib: float) -> Check:
    small = [
        gpu for gpu in gpus if gpu.memory_mib is None or round(gpu.memory_mib / 1024) < target_gib
    ]
    if small:
        shown = ", ".join(f"GPU{g.index} {'?' if g.memory_mib is None else g.memory_mib} MiB"
                          for g in small[:4])
        return Check("GPU memory", WARN, f"{shown}: less than the profile's {target_gib:g} GiB",
                     "the KV cache and mem_fraction_static were sized for the target GPU")
    least = min(gpu.memory_mib or 0 for gpu in gpus)
    return Check("GPU memory", PASS, f"at least {least} MiB per GPU (profile: {target_gib:g} GiB)")


def judge_free(name: str, path: str, total: int, free: int, minimum: float) -> Check:
    """A filesystem with at least `minimum` of it free."""
    share = free / total if total else 0.0
    detail = f"{gib(free)} free of {gib(total)} ({share:.0%}) at {path}"
    if share < minimum:
        return Check(name, FAIL, detail + f"; below {minimum:.0%}",
                     f"free space there (`docker system df`, old images, out/) to {minimum:.0%}+")
    return Check(name, PASS, detail)


def mem_total(meminfo: str) -> int | None:
    """MemTotal of /proc/meminfo, in bytes."""
    found = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    return int(found[1]) * 1024 if found else None
