"""`opsctl host p2p`: the parsers and the verdict, on samples of nvidia-smi's and lspci's formats.

Every sample below is hand-written after the documented output formats (`nvidia-smi topo -m`,
`nvidia-smi topo -p2p r` and their legends, `lspci -vvv`'s ACSCtl line); none is captured from a
machine. No GPU host is available here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.core.errors import EXIT_HOST, HostNotReady
from opsctl.deploy import hostcheck
from opsctl.deploy.hostcheck import Acs, check_p2p, iommu_state, parse_acs, parse_matrix, verdict
from opsctl.deploy.view import host_p2p_text

# Hand-written: two sockets, two GPUs per socket behind different host bridges, one NIC; the
# header is underlined with ANSI escapes as nvidia-smi does on a terminal.
TOPO_M = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNODE\tSYS\tSYS\tPIX\t0-31\t0\t\tN/A\n"
    "GPU1\tNODE\t X \tSYS\tSYS\tNODE\t0-31\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNODE\tSYS\t32-63\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNODE\t X \tSYS\t32-63\t1\t\tN/A\n"
    "NIC0\tPIX\tNODE\tSYS\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
)
# Hand-written: GPUs behind one PCIe switch (nothing crosses a host bridge).
TOPO_SWITCH = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPIX\t0-31\t0\nGPU1\tPIX\t X \t0-31\t0\n"
)


def p2p_sample(cross_socket: str = "OK") -> str:
    """Hand-written `nvidia-smi topo -p2p r` for TOPO_M's GPUs (space-aligned, as on a terminal)."""
    rows = []
    for row in range(4):
        cells = [
            "X" if row == col else "OK" if row // 2 == col // 2 else cross_socket
            for col in range(4)
        ]
        rows.append(f" GPU{row}   " + "       ".join(cells))
    return ("        GPU0    GPU1    GPU2    GPU3\n" + "\n".join(rows) + "\n\nLegend:\n\n"
            "  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
            "  GNS  = GPU not supported\n  TNS  = Topology not supported\n  NS   = Not supported\n"
            "  U    = Unknown\n")


LSPCI_ACS_OFF = (
    "00:01.0 PCI bridge: Example Root Port\n"
    "\tCapabilities: [220 v1] Access Control Services\n"
    "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
    "\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n"
)
LSPCI_ACS_ON = LSPCI_ACS_OFF.replace("ACSCtl:\tSrcValid-", "ACSCtl:\tSrcValid+")
MISMATCH = "NVML: Driver/library version mismatch"
LSPCI_NOT_ROOT = "00:01.0 PCI bridge: Example Root Port\n\tCapabilities: <access denied>\n"


def test_topology_matrix_keeps_gpu_pairs_only() -> None:
    cells = parse_matrix(TOPO_M)
    assert len(cells) == 12  # 4 GPUs x 3 peers; the NIC row and column are skipped
    assert cells[("GPU0", "GPU1")] == "NODE" and cells[("GPU0", "GPU2")] == "SYS"
    assert cells[("GPU3", "GPU2")] == "NODE"


def test_p2p_matrix_with_spaces_and_legend() -> None:
    cells = parse_matrix(p2p_sample("CNS"))
    assert cells[("GPU0", "GPU1")] == "OK" and cells[("GPU1", "GPU3")] == "CNS"
    assert len(cells) == 12


def test_iommu_modes_from_groups_and_kernel_arguments() -> None:
    assert iommu_state(0, "BOOT_IMAGE=/vmlinuz ro quiet").mode == "off"
    on = iommu_state(40, "BOOT_IMAGE=/vmlinuz intel_iommu=on ro")
    assert on.mode == "translated" and on.cmdline == ["intel_iommu=on"]
    assert iommu_state(40, "amd_iommu=on iommu=pt quiet").mode == "passthrough"


def test_acs_hints_from_lspci() -> None:
    assert parse_acs(LSPCI_ACS_OFF) == Acs(
        True, 0, "1 bridge(s) report ACS control, 0 with SrcValid+"
    )
    assert parse_acs(LSPCI_ACS_ON).redirecting == 1
    assert not parse_acs(LSPCI_NOT_ROOT).checked and "run as root" in parse_acs(LSPCI_NOT_ROOT).note
    assert not parse_acs(None).checked


def test_sys_is_advisable_only_when_everything_agrees() -> None:
    topo, ok = parse_matrix(TOPO_M), parse_matrix(p2p_sample())
    off, acs_clear = iommu_state(0, ""), parse_acs(LSPCI_ACS_OFF)
    good = verdict(topo, ok, off, acs_clear)
    assert (good.crossing_pairs, good.crossing_ok, good.sys_advisable) == (6, True, True)

    refused = verdict(topo, parse_matrix(p2p_sample("CNS")), off, acs_clear)
    assert refused.crossing_ok is False and refused.sys_advisable is False
    assert refused.not_ok[0] == "GPU0-GPU2 CNS (Chipset not supported)" and len(refused.not_ok) == 4

    assert verdict(topo, ok, iommu_state(12, "intel_iommu=on"), acs_clear).sys_advisable is False
    assert verdict(topo, ok, iommu_state(12, "iommu=pt"), acs_clear).sys_advisable is True
    assert verdict(topo, ok, off, parse_acs(LSPCI_ACS_ON)).sys_advisable is False
    unknown = verdict(topo, ok, off, parse_acs(LSPCI_NOT_ROOT))
    assert unknown.sys_advisable is None and "run as root" in unknown.reasons[0]


def test_nothing_to_gain_when_no_pair_crosses_a_host_bridge() -> None:
    topo = parse_matrix(TOPO_SWITCH)
    found = verdict(
        topo, {pair: "OK" for pair in topo}, iommu_state(0, ""), parse_acs(LSPCI_ACS_OFF)
    )
    assert found.crossing_ok is None and found.sys_advisable is False
    assert "no GPU pair's path crosses a host bridge" in found.reasons[0]


class FakeHost:
    """which/run/read/count for check_p2p: nvidia-smi and lspci answer from the samples."""

    def __init__(self, smi: bool = True, topo_code: int = 0) -> None:
        self.smi = smi
        self.topo_code = topo_code
        self.calls: list[list[str]] = []

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if name != "nvidia-smi" or self.smi else None

    def run(self, argv: list[str]) -> tuple[int, str]:
        self.calls.append(argv)
        if argv[1:] == ["topo", "-m"]:
            return self.topo_code, TOPO_M if self.topo_code == 0 else f"{MISMATCH}\n"
        if argv[1:] == ["topo", "-p2p", "r"]:
            return 0, p2p_sample()
        return 0, LSPCI_ACS_OFF

    def read(self, path: Path) -> str:
        return "BOOT_IMAGE=/vmlinuz iommu=pt ro" if path == hostcheck.KERNEL_CMDLINE else ""

    def count(self, path: Path) -> int:
        return 30 if path == hostcheck.IOMMU_GROUPS else 0


def test_check_reads_every_source_and_says_sys_is_advisable() -> None:
    host = FakeHost()
    report = check_p2p(which=host.which, run=host.run, read=host.read, count=host.count)
    assert report.gpus == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert [call[1:] for call in host.calls] == [["topo", "-m"], ["topo", "-p2p", "r"], ["-vvv"]]
    assert report.iommu.mode == "passthrough" and report.verdict.sys_advisable is True
    text = host_p2p_text(report)
    assert "GPU pairs across the root complex (PHB/NODE/SYS): 6, P2P reported OK" in text
    assert "NCCL_P2P_LEVEL=SYS: advisable" in text and "nccl_p2p_level: SYS" in text


def test_without_nvidia_smi_it_says_so_and_exits_4() -> None:
    host = FakeHost(smi=False)
    with pytest.raises(HostNotReady, match="nvidia-smi not found") as info:
        check_p2p(which=host.which, run=host.run, read=host.read, count=host.count)
    assert info.value.exit_code == EXIT_HOST and "GPU host" in info.value.hint
    assert host.calls == []


def test_a_failing_nvidia_smi_is_reported_with_its_last_line() -> None:
    host = FakeHost(topo_code=9)
    with pytest.raises(HostNotReady, match=rf"topo -m failed \(exit 9\): {MISMATCH}"):
        check_p2p(which=host.which, run=host.run, read=host.read, count=host.count)


def test_an_empty_topology_is_an_error_not_zero_gpus() -> None:
    host = FakeHost()
    real_run = host.run

    def empty_topo(argv: list[str]) -> tuple[int, str]:
        return (0, "\n") if argv[1:] == ["topo", "-m"] else real_run(argv)

    with pytest.raises(HostNotReady, match="listed no GPU pairs"):
        check_p2p(which=host.which, run=empty_topo, read=host.read, count=host.count)


def test_a_hung_or_unrunnable_tool_is_a_failed_run(tmp_path: Path) -> None:
    hung = tmp_path / "hung"
    hung.write_text("#!/bin/sh\nexec sleep 30\n")
    hung.chmod(0o755)
    code, text = hostcheck._run([str(hung)], timeout_s=0.5)
    assert code == 124 and "no answer within 0.5 s" in text
    code, text = hostcheck._run([str(tmp_path / "missing")])
    assert code == 126 and "cannot run" in text
    garbled = tmp_path / "garbled"
    garbled.write_text("#!/bin/sh\nprintf '\\377GPU0\\n'\n")
    garbled.chmod(0o755)
    assert hostcheck._run([str(garbled)]) == (0, "\ufffdGPU0\n")


