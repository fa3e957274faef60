"""GPU utilisation and memory during a bench level, from `nvidia-smi --query-gpu`.

Read only where the server runs on this host (a loopback URL, or a variant bench launched):
the GPUs of the machine that sends the load say nothing about a remote server. Without
nvidia-smi, or when it fails, the level says why instead of a number.
"""

from __future__ import annotations

import ipaddress
import math
import shutil
from collections.abc import Callable, Sequence
from functools import partial

import httpx
from pydantic import BaseModel

from opsctl.core.tools import Run, run_tool

# The name last: it is free text (a comma in it stays part of it).
QUERY = "index,utilization.gpu,memory.used,memory.total,name"
QUERY_TIMEOUT_S = 10.0
NO_SMI = "no nvidia-smi"
_RUN_SMI: Run = partial(run_tool, timeout_s=QUERY_TIMEOUT_S)


class GpuFigure(BaseModel):
    """One GPU over a level: utilisation (%) mean and max, memory used (MiB) max, its size."""

    index: int
    samples: int
    util_mean_pct: float | None = None
    util_max_pct: float | None = None
    mem_used_max_mib: float | None = None
    mem_total_mib: float | None = None
    name: str | None = None  # nvidia-smi's product name, e.g. what a chart's title shows


class GpuQueryFailed(Exception):
    """nvidia-smi ran and failed; the message is one line for the report."""


def _number(text: str) -> float | None:
    """A value of `--format=csv,nounits`; "[N/A]", "[Not Supported]" and the like are None."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


Row = tuple[int, float | None, float | None, float | None, str | None]


def parse_query(text: str) -> list[Row]:
    """(index, util %, memory used MiB, memory total MiB, name) per line of the CSV; lines that
    are not four or five fields with an integer index are skipped (no name: None)."""
    rows: list[Row] = []
    for line in text.splitlines():
        fields = line.split(",", 4)
        if len(fields) < 4 or not fields[0].strip().isdigit():
            continue
        name = fields[4].strip() if len(fields) == 5 else ""
        rows.append((int(fields[0]), _number(fields[1]), _number(fields[2]), _number(fields[3]),
                     name if name and not name.startswith("[") else None))
    return rows


class GpuProbe:
    """`nvidia-smi` on this host, found by `which` and run by `run` (both replaceable)."""

    def __init__(self, *, run: Run = _RUN_SMI, which: Callable[[str], str | None] = shutil.which,
                 indices: Sequence[int] | None = None) -> None:
        self._smi = which("nvidia-smi")
        self._run, self._indices = run, tuple(indices or ())

    def unavailable(self) -> str | None:
        return None if self._smi else NO_SMI

    def query(self) -> list[Row]:
        """One reading of every (selected) GPU; GpuQueryFailed when nvidia-smi fails."""
        if self._smi is None:
            raise GpuQueryFailed(NO_SMI)
        argv = [self._smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"]
        if self._indices:
            argv.append("--id=" + ",".join(str(i) for i in self._indices))
        code, text = self._run(argv)
        if code != 0:
            last = (text.strip().splitlines() or ["no output"])[-1]
            raise GpuQueryFailed(f"nvidia-smi failed (exit {code}): {last[:200]}")
        rows = parse_query(text)
        if not rows:
            raise GpuQueryFailed("nvidia-smi printed no GPU line")
        return rows


def on_this_host(base_url: str) -> bool:
    """Whether the URL names this machine: localhost or a loopback address."""
    try:
        host = httpx.URL(base_url).host
    except (httpx.InvalidURL, ValueError):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class GpuTally:
    """Running aggregates per GPU: memory stays bounded however long the level runs."""

    def __init__(self) -> None:
        self._util: dict[int, list[float]] = {}  # index -> [sum, count, max]
        self._mem: dict[int, tuple[float | None, float | None]] = {}
        self._seen: dict[int, int] = {}
        self._names: dict[int, str] = {}

    def add(self, rows: list[Row]) -> None:
        for index, util, used, total, name in rows:
            self._seen[index] = self._seen.get(index, 0) + 1
            if name:
                self._names[index] = name
            if util is not None:
                acc = self._util.setdefault(index, [0.0, 0.0, util])
                acc[0], acc[1], acc[2] = acc[0] + util, acc[1] + 1, max(acc[2], util)
            peak, size = self._mem.get(index, (None, None))
            if used is not None:
                peak = used if peak is None else max(peak, used)
            self._mem[index] = (peak, total if total is not None else size)

    def figures(self) -> list[GpuFigure]:
        out = []
        for index in sorted(self._seen):
            acc = self._util.get(index)
            peak, size = self._mem.get(index, (None, None))
            out.append(GpuFigure(
                index=index, samples=self._seen[index],
                util_mean_pct=round(acc[0] / acc[1], 1) if acc else None,
                util_max_pct=acc[2] if acc else None, mem_used_max_mib=peak, mem_total_mib=size,
                name=self._names.get(index)))
        return out
