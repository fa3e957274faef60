"""What `profile show` says about a profile: each variant's release, image, what it computes on
the model, and the warnings its release's recorded facts raise (errors never get this far: they
refuse the profile when it loads). Pure: the deploy view renders it.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsctl.config import releases, resolve
from opsctl.config.profiles import Deployment, Profile, check_argv, release_findings

# Where the speculative paths of the patch are described (each with sglang's file:line).
SPECULATIVE_PATCH_DOC = "docs/kv-gather-cast.md, speculative decoding"


@dataclass(frozen=True)
class VariantSummary:
    name: str
    description: str
    sglang_version: str
    base: str
    patched: bool
    computes: str
    warnings: list[str]
    # Speculative decoding, when the variant runs it: what it is and why the patch stays off there.
    speculative: str | None = None


@dataclass(frozen=True)
class ProfileShow:
    """The chosen variant's argv, and every variant's summary (the chosen one first)."""

    deployment: Deployment
    argv: list[str]
    variants: list[VariantSummary]


def computes(deployment: Deployment) -> str:
    """One line on what attention the variant computes for the profile's model."""
    argv = check_argv(deployment)[len(deployment.server.entrypoint):]
    return releases.computes(deployment.model.architecture or "", argv,
                             deployment.image.sglang_version)


def attention_kind(deployment: Deployment) -> str:
    """What the variant computes, as releases.computes says: dense or sparse attention (or, for
    another model or backend, its whole line). Only variants of one kind compare greedy outputs."""
    line = computes(deployment)
    return next((f"{kind} attention" for kind in ("dense", "sparse") if line.startswith(kind)),
                line)


def summary(deployment: Deployment) -> VariantSummary:
    spec = deployment.profile.variants[deployment.variant]
    return VariantSummary(
        name=deployment.variant,
        description=spec.description,
        sglang_version=deployment.image.sglang_version,
        base=deployment.image.base,
        patched=deployment.patched,
        computes=computes(deployment),
        warnings=release_findings(deployment).warnings,
        speculative=speculative(deployment),
    )


def speculative(deployment: Deployment) -> str | None:
    """One line on the variant's speculative decoding (MTP), None without it."""
    server = deployment.server
    if server.speculative_algorithm is None:
        return None
    shape = ", ".join(f"{name} {value}" for name, value in (
        ("steps", server.speculative_num_steps), ("top-k", server.speculative_eagle_topk),
        ("draft tokens", server.speculative_num_draft_tokens)) if value is not None)
    line = (f"{server.speculative_algorithm} ({shape or 'sglang defaults'}) on the checkpoint's "
            "draft layer")
    if deployment.patched:
        line += ("; the gather-then-cast patch converts only the rows that draft decode, target "
                 "verify and draft extend read, with a second BF16 workspace for the draft "
                 f"model's KV pool ({SPECULATIVE_PATCH_DOC})")
    return line


def show(profile: Profile, variant: str | None = None) -> ProfileShow:
    deployment = profile.resolve(variant)
    others = [name for name in profile.variants if name != deployment.variant]
    return ProfileShow(
        deployment=deployment,
        argv=check_argv(deployment),
        variants=[summary(profile.resolve(name)) for name in [deployment.variant, *others]],
    )


# --- the README's variant table, generated from the `profile resolve` records -------------------

VARIANT_TABLE_BEGIN = "<!-- variant-table: generated from patches/sglang/<version>/resolved/ by " \
    "scripts/variant_table.py; a unit test compares -->"
VARIANT_TABLE_END = "<!-- /variant-table -->"
_UNRESOLVED = "(no current record: run `opsctl profile resolve --write-records`)"


def variant_table(profile: Profile) -> str:
    """One row per variant: what its release's own resolution recorded (attention, DSA backends,
    KV dtype and row, prefill CUDA graph, speculation) beside what opsctl adds (the patch)."""
    rows = ["| variant | sglang | attention | DSA prefill / decode | KV cache | prefill CUDA graph "
            "| speculative | patch |", "|---|---|---|---|---|---|---|---|"]
    for name in profile.variants:
        deployment = profile.resolve(name)
        found = resolve.current_record(deployment)
        patch = "on" if deployment.patched else "off"
        if found is None:
            rows.append(f"| `{name}` | {deployment.image.sglang_version} | {_UNRESOLVED} | | | | | "
                        f"{patch} |")
            continue
        info, row = found[0]["server_info"], found[0].get("kv_row") or {}
        kv_row = f", {row['bytes']}-byte rows" if row.get("bytes") else ""
        graph = (
            "off"
            if info["prefill CUDA graph disabled"]
            else str(info["prefill CUDA-graph backend"])
        )
        speculative = "-" if info["speculative algorithm"] is None else (
            f"{info['speculative algorithm']} {info['speculative steps']}/"
            f"{info['speculative EAGLE top-k']}/{info['speculative draft tokens']}")
        rows.append(
            f"| `{name}` | {deployment.image.sglang_version} | {info['attention backend']} | "
            f"{info['DSA prefill backend']} / {info['DSA decode backend']} | "
            f"{info['KV cache dtype']}{kv_row} | {graph} | {speculative} | {patch} |"
        )
    return "\n".join(rows)


def replace_variant_table(text: str, table: str) -> str:
    """`text` (the README) with the block between the markers replaced by `table`."""
    begin, end = text.index(VARIANT_TABLE_BEGIN), text.index(VARIANT_TABLE_END)
    return text[:begin] + VARIANT_TABLE_BEGIN + "\n" + table + "\n" + text[end:]
