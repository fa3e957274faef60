"""`trace analyze`'s files: the analyses as JSON and markdown, and what moved between two traces.

Plain text only (the view draws the chart and the terminal tables).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opsctl.core.files import atomic_write_text
from opsctl.trace.analyze import Analysis, Row

ANALYSIS_JSON = "analysis.json"
ANALYSIS_MD = "analysis.md"
COMPARE_TOP = 10


@dataclass
class Moved:
    """One kernel or kind: ms per step in the base and the other trace."""

    name: str
    kind: str
    base_ms: float
    other_ms: float

    @property
    def delta_ms(self) -> float:
        return self.other_ms - self.base_ms


@dataclass
class Comparison:
    base: str
    other: str
    base_step_ms: float
    other_step_ms: float
    base_busy_ms: float
    other_busy_ms: float
    kinds: list[Moved]
    kernels: list[Moved]  # the largest moves first
    gone: list[str] = field(default_factory=list)  # signatures in base only
    new: list[str] = field(default_factory=list)  # signatures in other only
    kept: list[str] = field(default_factory=list)


def _moves(base: list[Row], other: list[Row]) -> list[Moved]:
    # Keyed by the full name: two kernels can share a short one.
    before = {row.full_name or row.name: row for row in base}
    after = {row.full_name or row.name: row for row in other}
    moved = [Moved(name=(before.get(key) or after[key]).name,
                   kind=(before.get(key) or after[key]).kind,
                   base_ms=before[key].ms if key in before else 0.0,
                   other_ms=after[key].ms if key in after else 0.0)
             for key in before.keys() | after.keys()]
    return sorted(moved, key=lambda m: (-abs(m.delta_ms), m.name))


def compare(base: Analysis, other: Analysis) -> Comparison:
    """What moved from `base` to `other` (per step): step time, kinds, kernels, signatures."""
    before = {f.signature for f in base.findings}
    after = {f.signature for f in other.findings}
    return Comparison(
        base=base.file, other=other.file, base_step_ms=base.step_ms,
        other_step_ms=other.step_ms, base_busy_ms=base.gpu_busy_ms,
        other_busy_ms=other.gpu_busy_ms, kinds=_moves(base.kinds, other.kinds),
        kernels=_moves(base.kernels, other.kernels)[:COMPARE_TOP],
        gone=sorted(before - after), new=sorted(after - before), kept=sorted(before & after))


def as_json(analyses: list[Analysis], comparison: Comparison | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"analyses": [dataclasses.asdict(a) for a in analyses]}
    if comparison is not None:
        payload["comparison"] = dataclasses.asdict(comparison)
    return payload


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines + [""]


def _rows(rows: list[Row], top: int) -> list[list[str]]:
    return [[f"`{r.name}`", r.kind or "-", f"{r.count:g}", f"{r.ms:.3f}", f"{r.share:.1%}"]
            for r in rows[:top]]


def analysis_markdown(a: Analysis, top: int = 12) -> list[str]:
    meta = ", ".join(f"{k}={v}" for k, v in a.meta.items() if k in ("profile", "variant",
                                                                        "mode", "layers"))
    lines = [f"## {Path(a.file).name}", "",
             f"- device: {a.device or 'not recorded'}" + (f"; {meta}" if meta else ""),
             f"- steps: {a.steps} (rule: {a.step_rule}"
             + (f"; {a.skipped_steps} non-decode forwards skipped" if a.skipped_steps else "")
             + ")",
             f"- step: {a.step_ms:.3f} ms (median), GPU busy {a.gpu_busy_ms:.3f} ms, idle "
             f"{a.idle_share:.0%}; per step {a.graph_launches:g} graph launches, "
             f"{a.host_launches:g} kernel launches", "", "### Verdict", ""]
    lines += [f"- **{f.signature}** ({f.severity}): {f.verdict}" for f in a.findings] or [
        "- no known signature: the time is spread over the kernels below"]
    lines += ["", "### GPU time by kind", ""]
    lines += _table(["kind", "kind", "per step", "ms/step", "share"], _rows(a.kinds, top))
    lines += ["### Top GPU kernels", ""]
    lines += _table(["kernel", "kind", "per step", "ms/step", "share"], _rows(a.kernels, top))
    lines += ["### Copies and casts", ""]
    lines += _table(["kernel", "kind", "per step", "ms/step", "share"], _rows(a.copies, top))
    lines += ["### Top CPU ops (inclusive time; share of the step)", ""]
    lines += _table(["op", "-", "per step", "ms/step", "share"], _rows(a.cpu_ops, top))
    if a.syncs:
        lines += ["### Host syncs", ""]
        lines += _table(["call", "-", "per step", "ms/step", "share"], _rows(a.syncs, top))
    lines += ["### Per step", ""]
    lines += _table(["#", "range", "period ms", "GPU busy ms", "kernels", "top kernel"],
                    [[str(s.index), f"`{s.label}`", f"{s.period_ms:.3f}", f"{s.gpu_busy_ms:.3f}",
                      str(s.kernels), f"`{s.top_kernel}` {s.top_share:.0%}"]
                     for s in a.per_step])
    return lines


def comparison_markdown(c: Comparison) -> list[str]:
    def row(m: Moved) -> list[str]:
        return [f"`{m.name}`", m.kind, f"{m.base_ms:.3f}", f"{m.other_ms:.3f}",
                f"{m.delta_ms:+.3f}"]

    lines = [f"## What moved: {Path(c.base).name} -> {Path(c.other).name}", "",
             f"- step {c.base_step_ms:.3f} -> {c.other_step_ms:.3f} ms "
             f"({c.other_step_ms - c.base_step_ms:+.3f}); GPU busy {c.base_busy_ms:.3f} -> "
             f"{c.other_busy_ms:.3f} ms",
             f"- signatures gone: {', '.join(c.gone) or 'none'}; new: "
             f"{', '.join(c.new) or 'none'}; still there: {', '.join(c.kept) or 'none'}", ""]
    lines += _table(["kind", "kind", "base ms", "other ms", "delta"], [row(m) for m in c.kinds])
    lines += _table(["kernel", "kind", "base ms", "other ms", "delta"],
                    [row(m) for m in c.kernels])
    return lines


def markdown(analyses: list[Analysis], comparison: Comparison | None,
             header: dict[str, str]) -> str:
    shown = ", ".join(f"{k} {v}" for k, v in header.items() if v)
    lines = ["# Trace analysis", "", f"{shown}." if shown else "", ""]
    for a in analyses:
        lines += analysis_markdown(a)
    if comparison is not None:
        lines += comparison_markdown(comparison)
    return "\n".join(lines).rstrip() + "\n"


def write(analyses: list[Analysis], comparison: Comparison | None, header: dict[str, str],
          out_dir: Path) -> list[Path]:
    payload = {"header": header, **as_json(analyses, comparison)}
    return [atomic_write_text(out_dir / ANALYSIS_JSON, json.dumps(payload, indent=2) + "\n"),
            atomic_write_text(out_dir / ANALYSIS_MD, markdown(analyses, comparison, header))]


def write_partial(header: dict[str, str], reason: str, out_dir: Path) -> Path:
    """analysis.json of a capture stopped before its analysis (Ctrl-C): no analyses, marked
    partial with why, as smoke, bench and decide mark theirs."""
    payload = {"header": header, "partial": True, "partial_reason": reason, "analyses": []}
    return atomic_write_text(out_dir / ANALYSIS_JSON, json.dumps(payload, indent=2) + "\n")
