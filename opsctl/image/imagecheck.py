"""Checks an opsctl image against what the host expects. STDLIB ONLY: it runs inside the image.

It runs twice per build, on the same expectations (a JSON object opsctl.image.context stages):
  * inside the Dockerfile, right after the patch set is applied, with `--compile`: byte-compiles
    the patched files (checked-hash .pyc, so the bytes do not depend on mtimes) and fails the
    build step if anything is off;
  * after the build, in a throwaway container of the finished image (no network, no GPU), as
    `python3 -c <this file's source> <expectations JSON>`: proves the committed image, not just a
    build step, carries the pinned sglang and the patched bytes.

It never imports sglang (its `__init__` pulls torch and transformers): the version comes from
the installed distribution's metadata and the package location from `importlib.util.find_spec`,
which works for the release image's editable install (/sgl-workspace/sglang/python) and for a
wheel in site-packages alike.

Prints one JSON report on stdout; exits 0 when every check passed, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import importlib.util
import json
import py_compile
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def sglang_root() -> Path:
    """The directory that contains the `sglang` package (site-packages or the editable tree)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise LookupError("no importable sglang package in this image")
    return Path(next(iter(spec.submodule_search_locations))).parent


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pyc_matches(source: Path) -> bool:
    """A checked-hash .pyc exists for `source` and was compiled from these exact bytes."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    if not cached.is_file():
        return False
    header = cached.read_bytes()[:16]
    flags = int.from_bytes(header[4:8], "little")
    # bit 0: hash-based, bit 1: check_source (PEP 552)
    return flags == 0b11 and header[8:16] == importlib.util.source_hash(source.read_bytes())


def check_switch(root: Path, module_rel: str, switch: str) -> tuple[bool, str]:
    """Load the installed switch module by path (not through sglang's package) and flip it."""
    path = root / module_rel
    spec = importlib.util.spec_from_file_location("opsctl_switch_probe", path)
    if spec is None or spec.loader is None or not path.is_file():
        return False, f"{path} is missing"
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # any failure to load is the finding
        return False, f"{module_rel} does not load: {type(exc).__name__}: {exc}"
    name = getattr(module, "SWITCH_ENV", None)
    enabled = getattr(module, "switch_enabled", None)
    if name != switch or not callable(enabled):
        return False, f"{module_rel} has SWITCH_ENV={name!r}, expected {switch!r}"
    on, off, unset = enabled({switch: "1"}), enabled({switch: "0"}), enabled({})
    ok = on is True and off is False and unset is False
    return ok, f"{switch}=1 -> {on}, =0 -> {off}, unset -> {unset}"


def imported_names(path: Path) -> set[str]:
    """Every module and name a Python file imports (parsed, never executed)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            names.update(part for alias in node.names for part in alias.name.split("."))
        elif isinstance(node, ast.ImportFrom):
            names.update((node.module or "").split("."))
            names.update(alias.name for alias in node.names)
    return names


def same_version(installed: str, pinned: str) -> bool:
    """PEP 440 `==` as release pins use it: a local label on the installed version (torch's
    +cu130) is ignored when the pin has none."""
    if "+" not in pinned:
        installed = installed.split("+", 1)[0]
    return installed.lower() == pinned.lower()


def installed_version(dist: str) -> str | None:
    """The version of the installed distribution (its metadata; nothing is imported)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


Record = Callable[[str, bool, str], None]


def run_checks(expect: dict[str, Any], compile_files: bool) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []

    def record(name: str, ok: bool, detail: str) -> None:
        results.append({"check": name, "ok": ok, "detail": detail})

    _check_metadata(expect, record)
    _check_modules(expect, record)
    _check_distributions(expect, record)
    files: dict[str, str] = expect.get("files", {})
    if not files:
        return results
    try:
        root = sglang_root()
    except LookupError as exc:
        record("sglang location", False, str(exc))
        return results
    record("sglang location", True, str(root))
    _check_files(root, files, compile_files, record)
    _check_switch(root, expect, files, record)
    return results


def _check_metadata(expect: dict[str, Any], record: Record) -> None:
    metadata_path = expect.get("metadata_path")
    if not metadata_path:
        return
    path = Path(metadata_path)
    if not path.is_file():
        record("build-metadata", False, f"{path} is missing")
        return
    found = json.loads(path.read_text()).get("content_hash")
    record("build-metadata", found == expect.get("content_hash"), f"{path} content_hash={found}")


def _check_modules(expect: dict[str, Any], record: Record) -> None:
    for module in expect.get("modules", []):
        try:
            ok = importlib.util.find_spec(module) is not None
            record(f"module {module}", ok, "importable" if ok else "not found")
        except ImportError as exc:
            record(f"module {module}", False, str(exc))


def _check_distributions(expect: dict[str, Any], record: Record) -> None:
    for dist, version in sorted(expect.get("distributions", {}).items()):
        found = installed_version(dist)
        if found is None:
            record(f"{dist} version", False, f"not installed, pinned {version}")
            continue
        record(f"{dist} version", same_version(found, version),
               f"installed {found}, pinned {version}")


def _check_files(root: Path, files: dict[str, str], compile_files: bool,
                 record: Record) -> None:
    for rel, want in sorted(files.items()):
        path = root / rel
        if not path.is_file():
            record(f"sha256 {rel}", False, f"{path} is missing")
            continue
        got = sha256_file(path)
        record(f"sha256 {rel}", got == want, f"{got}" if got == want else f"{got}, expected {want}")
        if not rel.endswith(".py"):
            continue
        if compile_files:
            py_compile.compile(str(path), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        record(f"pyc {rel}", pyc_matches(path), "checked-hash .pyc of these bytes")


def _check_switch(root: Path, expect: dict[str, Any], files: dict[str, str],
                  record: Record) -> None:
    switch = expect.get("switch")
    module_rel = expect.get("switch_module")
    if not (switch and module_rel):
        return
    record("runtime switch", *check_switch(root, module_rel, switch))
    stem = Path(module_rel).stem
    users = [rel for rel in sorted(files) if rel != module_rel and (root / rel).is_file()
             and rel.endswith(".py") and stem in imported_names(root / rel)]
    record("patched code uses the switch module", bool(users),
           f"{', '.join(users)} import {stem}" if users else f"no patched file imports {stem}")


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    compile_files = "--compile" in argv
    if len(args) != 1:
        print("usage: imagecheck.py EXPECT.json|'{...}' [--compile]", file=sys.stderr)
        return 2
    source = args[0]
    text = source if source.lstrip().startswith("{") else Path(source).read_text()
    expect = json.loads(text)
    results = run_checks(expect, compile_files)
    failed = [r for r in results if not r["ok"]]
    print(json.dumps({"ok": not failed, "results": results}))
    for result in failed:
        print(f"opsctl: image check failed: {result['check']}: {result['detail']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
