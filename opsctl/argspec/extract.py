"""Extract a pinned sglang's real argument parser into `patches/sglang/<version>/cli-args.json`.

The flags opsctl renders are checked against this record (`spec.py`), so it must come
from sglang's own code, never from a hand-kept list: the real wheel comes from the wheel cache
(opsctl.core.wheels, downloaded with pip once), is unpacked to a temp dir, and `probe.py` imports
the real `sglang.srt.server_args.ServerArgs` in a clean subprocess (`python -S -I`: no site
packages, no opsctl, no SGLANG_* environment) and dumps `parser._actions`. Only a few small
pure-data dependencies are real there (pinned below); every other third-party import is an inert
placeholder, which is fine for option strings, nargs and choices, and is recorded in `notes`.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl.argspec import spec as sglang_args
from opsctl.core import wheels
from opsctl.core.errors import BuildError, UsageError
from opsctl.core.files import atomic_write_text, check_output_path, sha256_file
from opsctl.core.paths import require_checkout

PROBE = Path(__file__).with_name("probe.py")
SERVER_ARGS = "sglang/srt/server_args.py"
PROBE_TIMEOUT_S = 300
# Real (not placeholder) modules in the probe. sglang builds its flags from msgspec Structs and
# typing/typing_extensions annotations (0.5.23), and compares versions with packaging; a
# placeholder there would change what is extracted. Versions as published on PyPI.
PROBE_DEPENDENCIES = ("msgspec==0.23.0", "packaging==26.4", "typing_extensions==4.16.0")


@dataclass(frozen=True)
class Extraction:
    version: str
    path: Path
    wheel: Path
    actions: int


def extract(
    version: str, wheel_dir: Path | None = None, output: Path | None = None
) -> Extraction:
    """Download (or reuse) the sglang wheel, dump its parser, write the JSON record.

    `wheel_dir` defaults to the wheel cache ($OPSCTL_WHEEL_CACHE).
    """
    if output is not None:
        check_output_path(output, "--output")  # before the wheel and the probe, not after
    else:
        require_checkout(f"recording sglang {version}'s parser", "--output")
    target = output or sglang_args.spec_path(version)
    with _staged(version, wheel_dir or wheels.cache_dir()) as stage:
        dump = run_probe(stage)
        server_args = stage.source_dir / SERVER_ARGS
        record = {
            "format": sglang_args.SPEC_FORMAT,
            "sglang_version": version,
            "provenance": {
                "wheel": stage.wheel.name,
                "wheel_sha256": sha256_file(stage.wheel),
                "server_args_sha256": sha256_file(server_args),
                "extract_command": f"opsctl sglang-args extract --version {version}",
                "probe_dependencies": list(PROBE_DEPENDENCIES),
                "placeholder_modules": dump["placeholder_modules"],
                "placeholder_versions": stage.pins,
                # Varies per run; everything else must be reproducible (tests compare it).
                "run": {
                    "extracted_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "python": platform.python_version(),
                },
            },
            "notes": build_notes(dump, server_args),
            "parser": dump["parser"],
            "actions": dump["actions"],
        }
    # Header keys first for readers; the probe already sorted the keys inside each action.
    # Never half-written; not scrubbed: the record is the wheel's own help text, kept verbatim.
    atomic_write_text(target, json.dumps(record, indent=1) + "\n", scrub=False)
    return Extraction(version=version, path=target, wheel=stage.wheel, actions=len(dump["actions"]))


def parse_with_real_parser(
    version: str, argvs: list[list[str]], wheel_dir: Path | None = None
) -> list[str | None]:
    """argparse's verdict on each argv from the real sglang parser (None = accepted).

    The ground truth that `ArgSpec.check` must reproduce; used by the tests.
    """
    staged = _staged(version, wheel_dir or wheels.cache_dir())
    with staged as stage, tempfile.TemporaryDirectory() as tmp:
        argvs_file = Path(tmp) / "argvs.json"
        argvs_file.write_text(json.dumps(argvs))
        results: list[str | None] = run_probe(stage, argvs_file)["parse_results"]
        return results


@dataclass(frozen=True)
class _Stage:
    wheel: Path
    source_dir: Path
    deps_dir: Path
    pins: dict[str, str]


@contextlib.contextmanager
def _staged(version: str, wheel_dir: Path) -> Iterator[_Stage]:
    """The real wheel and the probe's dependencies, unpacked in a temp dir."""
    if not sglang_args.VERSION_RE.match(version):
        raise UsageError(f"{version!r} is not a sglang version", hint="e.g. --version 0.5.23")
    wheel = ensure_wheel(version, wheel_dir, recorded_wheel_name(sglang_args.spec_path(version)))
    with tempfile.TemporaryDirectory(prefix="opsctl-sglang-args-") as tmp:
        source_dir = Path(tmp) / "wheel"
        deps_dir = Path(tmp) / "deps"
        _unpack(wheel, source_dir)
        for dep in ensure_probe_dependencies(wheel_dir):
            _unpack(dep, deps_dir)
        yield _Stage(wheel, source_dir, deps_dir, pinned_versions(source_dir, version))


def recorded_wheel_name(record: Path) -> str | None:
    """The wheel file an existing record was extracted from (re-extraction reuses its tags)."""
    try:
        return str(json.loads(record.read_text())["provenance"]["wheel"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ensure_wheel(version: str, wheel_dir: Path, recorded: str | None = None) -> Path:
    """The sglang wheel for `version` in wheel_dir, downloaded by pip when missing.

    sglang 0.5.23 ships one wheel per CPython version; when a record exists its wheel's tags
    are requested again, so re-extracting on another interpreter reads the same file.
    """
    match = wheels.WHEEL_NAME.match(recorded or "")
    if not (recorded and match and match["version"] == version):
        return wheels.fetch("sglang", version, wheel_dir)
    cached = wheel_dir / recorded
    if not cached.is_file():
        wheels.download(wheel_dir, f"sglang=={version}", *_tag_options(match))
    if cached.is_file():
        return cached
    raise BuildError(
        f"pip did not produce {recorded} in {wheel_dir}",
        hint="check PyPI access; delete the record to extract from another wheel",
    )


def _tag_options(match: re.Match[str]) -> list[str]:
    if match["plat"] == "any":
        return []
    py = match["py"]
    options = ["--platform", match["plat"], "--abi", match["abi"]]
    if re.fullmatch(r"cp\d{2,3}", py):
        options += ["--implementation", "cp", "--python-version", f"{py[2]}.{py[3:]}"]
    return options


def ensure_probe_dependencies(wheel_dir: Path) -> list[Path]:
    """Wheels of PROBE_DEPENDENCIES for this interpreter (msgspec is compiled), cached."""
    found = []
    for requirement in PROBE_DEPENDENCIES:
        name, version = requirement.split("==")
        found.append(wheels.fetch(name, version, wheel_dir))
    return found


def _unpack(wheel: Path, destination: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(destination)
    except zipfile.BadZipFile:
        raise BuildError(f"{wheel} is not a valid wheel", hint="delete it and run again") from None


def pinned_versions(source_dir: Path, version: str) -> dict[str, str]:
    """`==` pins of the wheel's unconditional requirements, by import-style name.

    Placeholder modules report these as `__version__`, so import-time version checks see what
    a real install would have (some releases assert on the torch version otherwise).
    """
    metadata = source_dir / f"sglang-{version}.dist-info" / "METADATA"
    pins: dict[str, str] = {}
    for line in metadata.read_text().splitlines():
        match = re.fullmatch(r"Requires-Dist: ([A-Za-z0-9_.-]+)==([^;,\s]+)", line.strip())
        if match:
            pins[re.sub(r"[-.]", "_", match[1].lower())] = match[2]
    return dict(sorted(pins.items()))


def run_probe(stage: _Stage, argvs_file: Path | None = None) -> dict[str, Any]:
    command = [
        sys.executable, "-S", "-I", "-B", str(PROBE), str(stage.source_dir), str(stage.deps_dir),
        json.dumps(stage.pins), *([str(argvs_file)] if argvs_file else []),
    ]
    # Only PATH and a fixed locale: SGLANG_* variables change some choices (see notes).
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S,
            cwd=stage.source_dir, check=False,
        )
    except subprocess.TimeoutExpired:
        raise BuildError("importing sglang's ServerArgs timed out", hint="see the probe") from None
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise BuildError(
            f"importing sglang's ServerArgs failed: {tail}",
            hint=f"run {PROBE.name} by hand on the unpacked wheel to see the full traceback",
        )
    dump: dict[str, Any] = json.loads(result.stdout)
    return dump


# --- notes ---------------------------------------------------------------------------------


def build_notes(dump: dict[str, Any], server_args: Path) -> list[str]:
    """Caveats a reader of the record needs, derived from the dump and the real source."""
    notes = [
        "Extracted by importing the real sglang.srt.server_args from the wheel in a clean "
        "`python -S -I` subprocess and calling ServerArgs.add_cli_args(argparse.ArgumentParser()),"
        " as sglang's prepare_server_args does; sglang/__init__.py was not run (frontend API "
        "and transformers patches only).",
        "Not installed for the extraction, imported as inert placeholders: "
        + ", ".join(dump["placeholder_modules"])
        + ". Import-time code that branches on them (platform probes) saw placeholders, so "
        "defaults are not recorded; option strings, nargs, types and choices are sglang's own. "
        "A placeholder's __version__ is the wheel's `==` pin (provenance.placeholder_versions), "
        "else 0.0.0+opsctl.placeholder.",
        "Custom type functions (`type: custom:...`) are checked as plain strings, except "
        "json.loads; sglang's own action classes are replayed by their nargs.",
        "The probe's environment held only PATH and LC_ALL: no SGLANG_* variables, so choices "
        "that sglang widens from the environment (listed below, if any) are their defaults.",
    ]
    for action in dump["actions"]:
        if "placeholder" in json.dumps(action.get("choices")):
            notes.append(
                f"{action['option_strings'][0]}: choices contain values of a placeholder module; "
                "a real install may accept different values."
            )
    notes.extend(_dynamic_choice_notes(server_args.parent.parent.parent))
    source = server_args.read_text()
    choices_module = server_args.parent / "arg_groups" / "choices.py"
    if choices_module.is_file():
        source += choices_module.read_text()
    if re.search(r"\badd_\w+_choices\b", source):
        notes.append(
            "sglang exposes add_*_choices() hooks so plugins can extend choice lists at runtime;"
            " a value only a plugin adds is rejected by this record."
        )
    return notes


def _dynamic_choice_notes(root: Path) -> list[str]:
    """Flags whose choices sglang computes at import or parser-build time, with the code."""
    sources = [root / SERVER_ARGS, *sorted((root / "sglang/srt/arg_groups/fields").glob("*.py"))]
    notes = []
    for path in sources:
        if not path.is_file():
            continue
        source = path.read_text()
        tree = ast.parse(source)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            choices = next((kw.value for kw in call.keywords if kw.arg == "choices"), None)
            if choices is None:
                continue
            if _is_written_out(choices, tree, source):
                continue
            constant = _constant_name(choices)
            if constant is not None:
                origin = _import_time_mutations(tree, source, constant)
            else:
                origin = _local_origin(call, parents, source, choices)
            expression = " ".join((ast.get_source_segment(source, choices) or "?").split())
            where = path.relative_to(root).as_posix()
            notes.append(
                f"{_flag_of(call, parents)}: choices computed by sglang from `{expression}`"
                + (f" ({origin})" if origin else "")
                + f" [{where}:{call.lineno}]."
            )
    return notes


def _is_written_out(node: ast.expr, tree: ast.Module, source: str) -> bool:
    """Literal constants, UPPER_CASE constants nothing changes at import, and `+` of those."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return all(_is_written_out(item, tree, source) for item in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_written_out(node.left, tree, source) and _is_written_out(
            node.right, tree, source
        )
    constant = _constant_name(node)
    return constant is not None and not _import_time_mutations(tree, source, constant)


def _constant_name(node: ast.expr) -> str | None:
    """`QUANTIZATION_CHOICES` or `Backend.ALL`: an UPPER_CASE module constant."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name if re.fullmatch(r"[A-Z][A-Z0-9_]*", name) else None


def _import_time_mutations(tree: ast.Module, source: str, name: str) -> str:
    """Statements outside any function that change the constant `name` (with their `if`)."""
    found = []
    pending: list[tuple[ast.stmt, str]] = [(statement, "") for statement in tree.body]
    while pending:
        statement, condition = pending.pop(0)
        if isinstance(statement, ast.If):
            test = " ".join((ast.get_source_segment(source, statement.test) or "").split())
            pending += [(child, f"if {test}: ") for child in statement.body]
            pending += [(child, f"if not ({test}): ") for child in statement.orelse]
        elif isinstance(statement, ast.Try | ast.With):
            pending += [(child, condition) for child in statement.body]
        elif _mutates(statement, name):
            text = " ".join((ast.get_source_segment(source, statement) or "").split())
            found.append(condition + text)
    return "; ".join(found)


def _mutates(statement: ast.stmt, name: str) -> bool:
    if isinstance(statement, ast.AugAssign):
        return isinstance(statement.target, ast.Name) and statement.target.id == name
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        func = statement.value.func
        return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == name
                and func.attr in {"append", "extend", "add", "insert", "update"})
    return False


def _flag_of(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> str:
    """`parser.add_argument("--x", ...)` names it; `field: A[T, Arg(choices=...)]` derives it."""
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    for keyword in call.keywords:
        if keyword.arg == "cli_name" and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    node: ast.AST | None = call
    while node is not None and not isinstance(node, ast.AnnAssign):
        node = parents.get(node)
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return "--" + node.target.id.replace("_", "-")
    return "(unknown flag)"


def _local_origin(
    call: ast.Call, parents: dict[ast.AST, ast.AST], source: str, choices: ast.expr
) -> str:
    """For choices built from locals of the enclosing function: the statements building them."""
    function: ast.AST | None = call
    while function is not None and not isinstance(function, ast.FunctionDef):
        function = parents.get(function)
    if function is None:
        return ""
    wanted = {node.id for node in ast.walk(choices) if isinstance(node, ast.Name)}
    parts = [
        _statement_text(statement, parents, source)
        for statement in ast.walk(function)
        if _builds(statement, wanted, call)
    ]
    return "; ".join(parts)


def _builds(statement: ast.AST, wanted: set[str], call: ast.Call) -> bool:
    """Whether `statement` (not the one holding `call`) assigns or mutates a name in `wanted`."""
    if not isinstance(statement, ast.Assign | ast.Expr | ast.AugAssign):
        return False
    if any(node is call for node in ast.walk(statement)):
        return False
    if isinstance(statement, ast.Assign):
        targets = {n.id for t in statement.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        return bool(targets & wanted)
    return any(_mutates(statement, name) for name in wanted)


def _statement_text(statement: ast.AST, parents: dict[ast.AST, ast.AST], source: str) -> str:
    """The statement's source on one line, behind the test of the `if` it sits in."""
    text = " ".join((ast.get_source_segment(source, statement) or "").split())
    parent = parents.get(statement)
    if isinstance(parent, ast.If):
        test = " ".join((ast.get_source_segment(source, parent.test) or "").split())
        text = f"if {test}: {text}"
    return text
