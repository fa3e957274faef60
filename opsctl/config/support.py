"""Which sglang version / variant pairs can work, judged from the patch sets' manifests only.

A manifest records what is known about a pinned release (which KV row layouts flashinfer MLA
reads correctly, for which architectures and backends); a profile variant that falls into a
known-broken combination is refused when the profile loads, before anything is built or run.
"""

from __future__ import annotations

from collections.abc import Sequence

from opsctl.config import patchsets


def _has_flag(args: Sequence[str], flag: str, value: str) -> bool:
    for i, arg in enumerate(args):
        if arg == f"{flag}={value}" or (arg == flag and i + 1 < len(args) and args[i + 1] == value):
            return True
    return False


def variant_support_problem(
    sglang_version: str,
    *,
    patched: bool,
    architecture: str | None,
    attention_backend: str | None,
    kv_cache_dtype: str | None,
    argv: Sequence[str],
) -> str | None:
    """Why a variant of an sglang image cannot work on `sglang_version`, or None.

    `argv` is the sglang command line rendered for the variant, where escape flags are looked for.
    """
    if sglang_version not in patchsets.available_versions():
        if patched:
            known = ", ".join(patchsets.available_versions()) or "none"
            return f"the variant needs the gather-then-cast patch, but there is no patch set " \
                   f"for sglang {sglang_version} (patch sets: {known})"
        return None
    manifest = patchsets.load_manifest(sglang_version)
    if patched and attention_backend != "flashinfer":
        return ("the gather-then-cast patch changes only the flashinfer MLA backend, but the "
                f"variant runs attention_backend={attention_backend!r}")
    for finding in manifest["layout_findings"]:
        if architecture not in finding["architectures"]:
            continue
        if attention_backend not in finding["attention_backends"]:
            continue
        if kv_cache_dtype not in finding["kv_cache_dtypes"]:
            continue
        escape = finding.get("raw_layout_args", [])
        if escape and all(_has_flag(argv, flag, value) for flag, value in escape):
            continue
        if not finding["works"]:
            return str(finding["reason"])
    return None
