"""The start-up line of the gather-then-cast patch, as the patched image would log it.

The patched flashinfer MLA backend logs one line when it starts (opsctl/kernels/kv_gather_cast.py,
`format_marker`): ``<MARKER> active key=value ...`` when the switch is on and the KV pool is
FP8 e4m3, else ``<MARKER> inactive reason=...``; `opsctl verify` reads it from the container log.
The simulator stands for the patched image, so it prints the same line for the settings it
resolved. The literals are repeated here (the simulator imports nothing from opsctl);
``tests/unit/test_sim_releases.py`` ties them to the kernel's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MARKER = "opsctl-kv-gather-cast:"
SWITCH_ENV = "OPSCTL_KV_GATHER_CAST"
ACTIVE, INACTIVE = "active", "inactive"
REASON_SWITCH_OFF = "switch_off"
REASON_POOL_NOT_FP8 = "pool_not_fp8_e4m3"
# The patched backend (only it logs the line) and the one KV dtype the kernel converts.
PATCHED_BACKEND = "flashinfer"
FP8_KV = "fp8_e4m3"
ROW_ELEMS = 576  # kv_lora_rank 512 + rope 64: one MLA latent row
BF16_BYTES = 2


def _line(state: str, **fields: object) -> str:
    return " ".join([MARKER, state, *(f"{key}={value}" for key, value in fields.items())])


def marker_line(settings: Mapping[str, Any], environ: Mapping[str, str], pool_rows: int
                ) -> str | None:
    """The line for these resolved settings, or None when the patched backend is not used."""
    if settings.get("attention_backend") != PATCHED_BACKEND:
        return None
    if environ.get(SWITCH_ENV, "") != "1":
        return _line(INACTIVE, reason=REASON_SWITCH_OFF, switch=SWITCH_ENV)
    if settings.get("kv_cache_dtype") != FP8_KV:
        return _line(INACTIVE, reason=REASON_POOL_NOT_FP8, pool_dtype="torch.bfloat16",
                     query_dtype="torch.bfloat16")
    return _line(ACTIVE, workspace_bytes=pool_rows * ROW_ELEMS * BF16_BYTES, rows=pool_rows,
                 row_elems=ROW_ELEMS, dtype="torch.bfloat16", device="simulated")
