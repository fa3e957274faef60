"""Render the gather-then-cast benchmark JSON as the Markdown tables of docs/kv-gather-cast.md.

    python3 bench/kv_gather_cast_table.py bench/results/kv_gather_cast_bound_h200.json   # print
    python3 bench/kv_gather_cast_table.py THAT_JSON --update docs/kv-gather-cast.md   # in place
    python3 bench/kv_gather_cast_table.py THAT_JSON --check README.md docs/kv-gather-cast.md  # lint

The RTX PRO 6000 columns are a PROJECTION, not a measurement. Ours: the H200 step time at the
smallest size is taken as a fixed cost (78 launches, latency-bound; assumed unchanged), and the
rest, which grows with the bytes moved, is scaled by the datasheet bandwidth ratio 4.8 / 1.792
TB/s (the same fraction of datasheet bandwidth on both cards). Stock: only its bandwidth floor
(pool bytes / 1.792 TB/s), a lower bound.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RTX_PRO_6000_GBPS = 1_792.0  # datasheet: 512-bit GDDR7 at 28 Gbps
H200_DATASHEET_GBPS = 4_800.0
BEGIN, END = "<!-- kv-gather-cast-table:begin -->", "<!-- kv-gather-cast-table:end -->"


def _tokens(n: int) -> str:
    return f"{n:,}"


def _shared_table(report: dict[str, Any]) -> list[str]:
    """Id counts near and past the pool (shared prefixes), where ours may convert linearly."""
    if not report.get("shared_rows"):
        return []
    out = [
        "",
        f"Shared prefixes, same run ({report['shared_index_pattern']}); \"gather only\" is the "
        "kernel with its linear branch disabled:",
        "",
        "| case | ids | ids / pool | distinct rows | ours: branch | stock cast, step "
        "| gather only, step | ours, step | ours, per layer |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in report["shared_rows"]:
        out.append(
            f"| {r['case']} | {_tokens(r['ids'])} | {r['ids_over_pool']:.2f} "
            f"| {_tokens(r['distinct_rows'])} | {r['ours_branch']} | {r['stock_step_ms']:.2f} ms "
            f"| {r['gather_only_step_ms']:.2f} ms | **{r['ours_step_ms']:.2f} ms** "
            f"| {r['ours_layer_us']:.1f} us |"
        )
    return out


def render(report: dict[str, Any]) -> str:
    layers = report["layers"]
    bw = report["copy_bandwidth_gbps"]
    per_row_bytes = 3 * report["row_elems"]  # one FP8 row read + one BF16 row written
    pool_bytes = report["pool_rows"] * per_row_bytes * layers
    out = [
        f"Measured on {report['gpu']} ({report['sm_count']} SMs), torch {report['torch']}, "
        f"triton {report['triton']}, CUDA {report['cuda']}, {report['date_utc']}; device copy "
        f"bandwidth {bw:,.0f} GB/s (read + write). Pool {report['pool_rows']:,} rows x "
        f"{report['row_elems']} FP8 per layer, {layers} layers, {report['index_pattern']}. "
        f"{report['timing']}. Command: `{report['command']}`.",
        "",
        "| active tokens | stock cast, step | seed torch gather-cast, step (graph) | seed, step "
        "(eager) | ours, step | ours, per layer | floor, step | ours / floor |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        out.append(
            f"| {_tokens(r['active_tokens'])} | {r['stock_step_ms']:.2f} ms "
            f"| {r['seed_graph_step_ms']:.3f} ms | {r['seed_eager_step_ms']:.2f} ms "
            f"| **{r['ours_step_ms']:.3f} ms** | {r['ours_layer_us']:.1f} us "
            f"| {r['floor_step_ms']:.3f} ms | {r['ours_over_floor']:.2f}x |"
        )
    out += _shared_table(report)
    out += [
        "",
        "Targets on the H200 (from the JSON's `targets`): "
        + ", ".join(f"`{k}`: {'met' if v else 'MISSED'}" for k, v in report["targets"].items())
        + ".",
        "",
        f"**Projection (not measured) to the RTX PRO 6000 at {RTX_PRO_6000_GBPS:,.0f} GB/s**, "
        "per 78-layer step. Ours = H200 time at the smallest size (fixed launch cost, assumed "
        "unchanged) + the rest of the H200 time x "
        f"{H200_DATASHEET_GBPS:,.0f}/{RTX_PRO_6000_GBPS:,.0f} (datasheet bandwidth ratio).",
        "",
        "| active tokens | stock cast: bandwidth floor (lower bound) | ours, projected "
        "| ours: bandwidth floor |",
        "|---:|---:|---:|---:|",
    ]
    stock_floor_ms = pool_bytes / (RTX_PRO_6000_GBPS * 1e9) * 1e3
    fixed_ms = min(r["ours_step_ms"] for r in report["rows"])
    ratio = H200_DATASHEET_GBPS / RTX_PRO_6000_GBPS
    for r in report["rows"]:
        floor_ms = r["active_tokens"] * per_row_bytes * layers / (RTX_PRO_6000_GBPS * 1e9) * 1e3
        projected = fixed_ms + (r["ours_step_ms"] - fixed_ms) * ratio
        out.append(f"| {_tokens(r['active_tokens'])} | >= {stock_floor_ms:.1f} ms "
                   f"| {projected:.3f} ms | {floor_ms:.3f} ms |")
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--update", type=Path, help="rewrite the table block of this file")
    parser.add_argument("--check", type=Path, nargs="+", default=[],
                        help="exit 1 when a file's table block differs from the report's")
    args = parser.parse_args()
    table = render(json.loads(args.report.read_text()))
    stale = [
        path for path in args.check if _with_table(path.read_text(), table) != path.read_text()
    ]
    for path in stale:
        print(
            f"{path}: the table block differs from {args.report}; run --update {path}",
            file=sys.stderr,
        )
    if args.check:
        return 1 if stale else 0
    if args.update is None:
        sys.stdout.write(table)
        return 0
    args.update.write_text(_with_table(args.update.read_text(), table))
    return 0


def _with_table(text: str, table: str) -> str:
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + table + text[end:]


if __name__ == "__main__":
    sys.exit(main())
