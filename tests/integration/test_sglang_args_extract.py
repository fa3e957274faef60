"""Re-extract the pinned sglang parsers from the real wheels (needs PyPI unless cached).

1. The committed patches/sglang/<version>/cli-args.json must equal a fresh extraction (apart from
   `provenance.run`: time and interpreter), so a hand edit of the record fails here.
2. `ArgSpec.check` must agree with sglang's own parser on a corpus built from every flag.

Wheels are cached in $OPSCTL_WHEEL_CACHE (default /var/cache/opsctl-wheels) and reused.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opsctl.argspec.extract import extract, parse_with_real_parser
from opsctl.argspec.spec import ArgSpec, load_spec, spec_path
from opsctl.core import wheels

PINNED = ("0.5.23", "0.5.15")
WHEEL_DIR = wheels.cache_dir()
MODEL = ["--model-path", "/m"]


def _without_run(record: dict[str, Any]) -> dict[str, Any]:
    provenance = dict(record["provenance"])
    provenance.pop("run")
    return {**record, "provenance": provenance}


@pytest.mark.parametrize("version", PINNED)
def test_committed_record_equals_a_fresh_extraction(version: str, tmp_path: Path) -> None:
    committed = json.loads(spec_path(version).read_text())
    result = extract(version, WHEEL_DIR, tmp_path / "cli-args.json")
    fresh = json.loads(result.path.read_text())
    assert fresh["provenance"]["run"]["extracted_at"]
    assert _without_run(fresh) == _without_run(committed), (
        f"patches/sglang/{version}/cli-args.json differs from the real wheel's parser; "
        f"regenerate it with `opsctl sglang-args extract --version {version}`"
    )


def _corpus(spec: ArgSpec) -> list[list[str]]:
    """Every flag used well and badly: values, missing values, extra values, abbreviations."""
    argvs = [
        [], MODEL, [*MODEL, "--no-such-flag"], [*MODEL, "--cuda-graph-max-bs", "8"],
        [*MODEL, "--tp", "8"], ["--model", "/m", "--port", "1"],
    ]
    for action in spec.actions:
        options = action["option_strings"]
        if not options or action["kind"] in {"help", "version"}:
            continue
        for flag in options:
            nargs, kind = action["nargs"], action["kind"]
            if nargs == 0 or kind in {"store_true", "store_false", "store_const", "count"}:
                argvs += [[*MODEL, flag], [*MODEL, flag, "extra"], [*MODEL, f"{flag}=x"]]
                continue
            argvs += [[*MODEL, flag], [*MODEL, flag[:-1]]]
            custom = (action["type"] or "").startswith("custom:") and action["type"] != (
                "custom:json.loads"
            )
            if custom:
                continue  # values of sglang's own type functions are not checked (see notes)
            good = str(action["choices"][-1]) if action["choices"] else {
                "int": "3", "float": "0.5", "custom:json.loads": "{}"}.get(action["type"], "x")
            many = nargs in {"+", "*"} or isinstance(nargs, int)
            count = nargs if isinstance(nargs, int) else 2
            values = [good] * count if many else [good]
            argvs += [[*MODEL, flag, *values], [*MODEL, flag, "not-a-valid-value"]]
    return argvs


def _normalized(message: str | None) -> str | None:
    """Sort a `(choose from ...)` list: sglang builds some choices as sets (hash order)."""
    if message is None:
        return None
    match = re.search(r"\(choose from (.*)\)$", message)
    if not match:
        return message
    return message[: match.start(1)] + ", ".join(sorted(match[1].split(", "))) + ")"


@pytest.mark.parametrize("version", PINNED)
def test_rebuilt_parser_agrees_with_the_real_one(version: str) -> None:
    spec = load_spec(version)
    argvs = _corpus(spec)
    real = parse_with_real_parser(version, argvs, WHEEL_DIR)
    mismatches = [
        (argv, expected, actual)
        for argv, expected, actual in zip(argvs, real, map(spec.check, argvs), strict=True)
        if _normalized(expected) != _normalized(actual)
    ]
    assert len(argvs) > 2 * len(spec.actions)
    assert sum(result is not None for result in real) > len(argvs) // 4
    assert mismatches == []


@pytest.mark.parametrize("version", PINNED)
def test_help_is_rejected_as_the_real_parser_exits(version: str) -> None:
    [real] = parse_with_real_parser(version, [[*MODEL, "--help"]], WHEEL_DIR)
    assert real is not None  # the real parser printed help and exited
    assert load_spec(version).check([*MODEL, "--help"]) is not None


def _opsctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from opsctl.cli import main; main()", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )


def test_cli_extract_writes_the_record(tmp_path: Path) -> None:
    output = tmp_path / "out.json"
    result = _opsctl("sglang-args", "extract", "--version", "0.5.15",
                     "--wheel-dir", str(WHEEL_DIR), "--output", str(output))
    assert result.returncode == 0, result.stderr
    assert "arguments of sglang 0.5.15" in result.stdout
    committed = json.loads(spec_path("0.5.15").read_text())
    assert _without_run(json.loads(output.read_text())) == _without_run(committed)


def test_cli_extract_rejects_a_bad_version_with_exit_2(tmp_path: Path) -> None:
    result = _opsctl("sglang-args", "extract", "--version", "../0.5.15",
                     "--wheel-dir", str(tmp_path), "--output", str(tmp_path / "x.json"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "not a sglang version" in result.stderr
