"""SAMPLES for `opsctl doctor`'s tests: FAKE `nvidia-smi` and `lspci` answers written for the
tests (driver versions, UUIDs, memory figures and topologies are made up in the shapes the tools
print), never a real machine's output. `fake_tools(folder)` puts both scripts in `folder`.
"""

from __future__ import annotations

from pathlib import Path

GLM5 = "glm5-nvfp4-rtx6000"
BASE = "lmsysorg/sglang:v0.5.21-cu130"

# SAMPLE `nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version
# --format=csv,noheader,nounits` answers (made up, in the tool's shape).
SAMPLE_RTX = "".join(f"{i}, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887, "
                     "580.00.01\n" for i in range(8))
SAMPLE_H100 = "".join(f"{i}, NVIDIA H100 80GB HBM3, 9.0, 81559, 580.00.01\n" for i in range(8))
SAMPLE_OLD_DRIVER = SAMPLE_RTX.replace("580.00.01", "570.00.01")
SAMPLE_FOUR = "".join(SAMPLE_RTX.splitlines(keepends=True)[:4])
SAMPLE_GARBAGE = "Failed to initialize NVML: Driver/library version mismatch\n"
# SAMPLE `nvidia-smi -L` from inside a container (made-up UUIDs).
SAMPLE_LIST = "".join(
    f"GPU {i}: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-sample-{i})\n"
    for i in range(8)
)


def _matrix(cell: str) -> str:
    """A SAMPLE 8-GPU `nvidia-smi topo` matrix: `cell` between every pair."""
    names = [f"GPU{i}" for i in range(8)]
    rows = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity"]
    for i, name in enumerate(names):
        cells = ["X" if j == i else cell for j in range(8)]
        rows.append(name + "\t" + "\t".join(cells) + "\t0-63\t0")
    return "\n".join(rows) + "\n\nLegend:\n\n  X    = Self\n"


def fake_tools(folder: Path, query: str = SAMPLE_RTX) -> Path:
    """A FAKE nvidia-smi and lspci in `folder` (put it first on PATH), answering SAMPLES with
    the shell's own printf (PATH may hold nothing else)."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n# FAKE nvidia-smi: prints SAMPLES written by tests/unit/test_doctor.py\n"
        'case "$*" in\n'
        f"  *--query-gpu=*) printf '%s' '{query}'; exit ${{FAKE_SMI_EXIT:-0}};;\n"
        f"  'topo -m') printf '%s' '{_matrix('NODE')}';;\n"
        f"  'topo -p2p r') printf '%s' '{_matrix('OK')}';;\n"
        "  *) exit 9;;\n"
        "esac\n"
    )
    lspci = folder / "lspci"
    lspci.write_text(
        "#!/bin/sh\n# FAKE lspci -vvv: a SAMPLE bridge with ACS control, no SrcValid+\n"
        "echo '00:01.0 PCI bridge: Sample bridge'\n"
        "echo '\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd-'\n"
    )
    for script in (smi, lspci):
        script.chmod(0o755)
    return folder
