"""`opsctl host p2p`: may NCCL use GPU peer-to-peer across the root complex on this host?

`NCCL_P2P_LEVEL=SYS` lets NCCL use P2P between GPUs whose PCIe path crosses a host bridge or
the socket interconnect. Where the platform supports it that is the fast path; where it does not
(the chipset refuses it, the IOMMU remaps device DMA, PCIe ACS redirects peer traffic up to the
root complex) NCCL's troubleshooting guide reports hangs and slowdowns. So the profiles leave
the level to NCCL (`container.nccl_p2p_level: null`) and this command says whether setting SYS
is advisable here, from what the driver and the kernel report:

  - `nvidia-smi topo -m`: the path type of each GPU pair (PIX, PXB, PHB, NODE, SYS, NV#);
  - `nvidia-smi topo -p2p r`: whether the driver reports P2P reads OK for each pair;
  - IOMMU: entries under /sys/kernel/iommu_groups, and iommu=/intel_iommu=/amd_iommu= on
    /proc/cmdline (iommu=pt leaves device DMA untranslated);
  - ACS: `lspci -vvv` bridges whose ACSCtl shows SrcValid+ (readable as root only).

The parsers are pure functions; collaborators (which, run, read) are arguments, so the whole
check runs in unit tests on hand-written samples.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opsctl.core.errors import HostNotReady, OpsctlError
from opsctl.core.files import read_bounded
from opsctl.core.tools import Run, last_line
from opsctl.core.tools import run_tool as _run

# Path types whose traffic crosses a PCIe host bridge (PHB), the interconnect between host
# bridges of one NUMA node (NODE), or the SMP interconnect between sockets (SYS).
CROSSES_HOST_BRIDGE = frozenset({"PHB", "NODE", "SYS"})
# The legend of `nvidia-smi topo -p2p`.
P2P_STATUS = {
    "OK": "Status Ok",
    "CNS": "Chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "Topology not supported",
    "NS": "Not supported",
    "DR": "Disabled by regkey",
    "U": "Unknown",
}
MAX_HOST_FILE_BYTES = 1 << 20  # /proc/cmdline: at most a few kB
IOMMU_GROUPS = Path("/sys/kernel/iommu_groups")
KERNEL_CMDLINE = Path("/proc/cmdline")
_IOMMU_ARG = re.compile(r"^(iommu|intel_iommu|amd_iommu|pcie_acs_override)=")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"GPU\d+")

Pair = tuple[str, str]


def parse_matrix(text: str) -> dict[Pair, str]:
    """The GPU x GPU cells of an nvidia-smi topology matrix (`topo -m` or `topo -p2p r`).

    The first line naming GPUs is the header (`GPU0 GPU1 ...`, then NIC and affinity columns in
    `topo -m`); after it each GPU row starts with its name. Rows of other devices and the legend are
    skipped. Cells are single tokens (X, OK, CNS, PHB, SYS, NV12, ...), so tabs or spaces both do.
    """
    gpus: list[str] = []
    cells: dict[Pair, str] = {}
    for raw in _ANSI.sub("", text).splitlines():
        if raw.strip().startswith("Legend"):
            break
        tokens = raw.split()
        if not tokens:
            continue
        if not gpus and any(_GPU.fullmatch(t) for t in tokens):
            gpus = [t for t in tokens if _GPU.fullmatch(t)]  # the header comes first
        elif gpus and tokens[0] in gpus:
            for column, value in zip(gpus, tokens[1:1 + len(gpus)], strict=False):
                if column != tokens[0]:
                    cells[(tokens[0], column)] = value
    return cells


@dataclass(frozen=True)
class Iommu:
    groups: int  # entries under /sys/kernel/iommu_groups: 0 = no DMA remapping
    cmdline: list[str]  # the IOMMU/ACS arguments of the kernel command line

    @property
    def mode(self) -> str:
        if self.groups == 0:
            return "off"
        return "passthrough" if "iommu=pt" in self.cmdline else "translated"


def iommu_state(groups: int, cmdline: str) -> Iommu:
    return Iommu(groups=groups, cmdline=[arg for arg in cmdline.split() if _IOMMU_ARG.match(arg)])


@dataclass(frozen=True)
class Acs:
    checked: bool  # whether the bridges' ACS control could be read
    redirecting: int  # bridges whose ACSCtl shows SrcValid+ (peer traffic sent up to the root)
    note: str


def parse_acs(lspci_vvv: str | None) -> Acs:
    """ACS hints from `lspci -vvv` (None: lspci is not installed)."""
    if lspci_vvv is None:
        return Acs(False, 0, "lspci not installed (pciutils): ACS not read")
    controls = [line for line in lspci_vvv.splitlines() if "ACSCtl:" in line]
    if not controls and "access denied" in lspci_vvv:
        return Acs(False, 0, "lspci could not read PCI capabilities: run as root to read ACS")
    redirecting = sum("SrcValid+" in line for line in controls)
    return Acs(True, redirecting, f"{len(controls)} bridge(s) report ACS control, "
               f"{redirecting} with SrcValid+")


@dataclass(frozen=True)
class Verdict:
    crossing_pairs: int  # GPU pairs whose path crosses a host bridge (PHB, NODE, SYS)
    crossing_ok: bool | None  # every such pair reports P2P reads OK; None: there is none
    not_ok: list[str]  # "GPU0-GPU4 CNS (Chipset not supported)"
    sys_advisable: bool | None  # None: cannot tell yet (see reasons)
    reasons: list[str]


def gpu_index(name: str) -> int:
    return int(name.removeprefix("GPU"))


def verdict(topology: dict[Pair, str], p2p: dict[Pair, str], iommu: Iommu, acs: Acs) -> Verdict:
    crossing = sorted(((a, b) for (a, b), link in topology.items()
                       if link in CROSSES_HOST_BRIDGE and gpu_index(a) < gpu_index(b)),
                      key=lambda pair: (gpu_index(pair[0]), gpu_index(pair[1])))
    not_ok = [
        f"{a}-{b} {p2p.get((a, b), '?')} ({P2P_STATUS.get(p2p.get((a, b), ''), 'not reported')})"
        for a, b in crossing
        if p2p.get((a, b)) != "OK"
    ]
    blockers: list[str] = []
    if not_ok:
        blockers.append(f"the driver reports P2P reads not OK for {len(not_ok)} of {len(crossing)} "
                        "pair(s) across the root complex")
    if iommu.mode == "translated":
        blockers.append(f"the IOMMU translates device DMA ({iommu.groups} groups, no iommu=pt): "
                        "peer traffic goes through the root complex's remapping")
    if acs.redirecting:
        blockers.append(f"{acs.redirecting} PCI bridge(s) have ACS SrcValid+: peer traffic is "
                        "redirected to the root complex")
    advisable: bool | None
    if blockers:
        advisable, reasons = False, blockers
    elif not crossing:
        advisable, reasons = False, ["no GPU pair's path crosses a host bridge: NCCL's own choice "
                                     "already covers every pair"]
    elif not acs.checked:
        advisable, reasons = None, [f"P2P reads OK across the root complex, but {acs.note}"]
    else:
        advisable, reasons = True, [f"P2P reads OK for all {len(crossing)} pair(s) across the root "
                                    f"complex; IOMMU {iommu.mode}; no ACS redirection"]
    return Verdict(crossing_pairs=len(crossing), crossing_ok=None if not crossing else not not_ok,
                   not_ok=not_ok, sys_advisable=advisable, reasons=reasons)


@dataclass(frozen=True)
class HostP2pReport:
    gpus: list[str]
    topology: dict[Pair, str]
    p2p: dict[Pair, str]
    iommu: Iommu
    acs: Acs
    verdict: Verdict


def _read(path: Path) -> str:
    try:
        return read_bounded(path, "host file", MAX_HOST_FILE_BYTES).decode(errors="replace")
    except (OSError, OpsctlError):
        return ""


def _count(path: Path) -> int:
    try:
        return sum(1 for _ in path.iterdir())
    except OSError:
        return 0


def check_p2p(
    *,
    which: Callable[[str], str | None] = shutil.which,
    run: Run = _run,
    read: Callable[[Path], str] = _read,
    count: Callable[[Path], int] = _count,
) -> HostP2pReport:
    """Read the topology, P2P status, IOMMU and ACS state; HostNotReady (exit 7) without
    nvidia-smi."""
    smi = which("nvidia-smi")
    if smi is None:
        raise HostNotReady("nvidia-smi not found: this host's GPU topology cannot be read",
                          hint="run `opsctl host p2p` on the GPU host, where the NVIDIA driver "
                          "installs nvidia-smi")
    outputs = []
    for args in (["topo", "-m"], ["topo", "-p2p", "r"]):
        code, text = run([smi, *args])
        if code != 0:
            raise HostNotReady(f"nvidia-smi {' '.join(args)} failed (exit {code}): "
                                f"{last_line(text)}",
                              hint="check the driver with `nvidia-smi`")
        outputs.append(text)
    topology, p2p = parse_matrix(outputs[0]), parse_matrix(outputs[1])
    if not topology:
        # An empty or unrecognised matrix is not "0 GPUs, no problem": nothing was learnt.
        raise HostNotReady("nvidia-smi topo -m listed no GPU pairs: the topology could not be read",
                          hint="run `nvidia-smi topo -m` on the host and check the driver")
    lspci = which("lspci")
    acs = parse_acs(run([lspci, "-vvv"])[1] if lspci else None)
    iommu = iommu_state(count(IOMMU_GROUPS), read(KERNEL_CMDLINE))
    gpus = sorted({a for a, _ in topology}, key=gpu_index)
    return HostP2pReport(gpus=gpus, topology=topology, p2p=p2p, iommu=iommu, acs=acs,
                         verdict=verdict(topology, p2p, iommu, acs))
