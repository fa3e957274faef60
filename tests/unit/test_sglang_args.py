"""ArgSpec: the pinned sglang parsers rebuilt from the committed
patches/sglang/<version>/cli-args.json."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from opsctl.argspec import spec as sglang_args
from opsctl.argspec.spec import ArgSpec, load_spec
from opsctl.core.errors import EXIT_USAGE, ProfileError
from opsctl.core.paths import PROJECT_DIR_ENV, RELEASES_DIR, release_dir

PINNED = ("0.5.23", "0.5.15")
MODEL = ["--model-path", "/models/GLM-5-NVFP4"]


def glm5_launch(cuda_graph_flag: str) -> list[str]:
    """The GLM-5-NVFP4 8x RTX PRO 6000 launch (reference/sglang-deployment-facts.md, section 2)."""
    return [
        *MODEL,
        "--served-model-name", "glm-5",
        "--host", "0.0.0.0",
        "--port", "30000",
        "--tp-size", "8",
        "--trust-remote-code",
        "--quantization", "modelopt_fp4",
        "--kv-cache-dtype", "fp8_e4m3",
        "--attention-backend", "flashinfer",
        "--moe-runner-backend", "flashinfer_cutlass",
        "--disable-shared-experts-fusion",
        "--mem-fraction-static", "0.85",
        "--chunked-prefill-size", "8192",
        cuda_graph_flag, "64",
        "--max-running-requests", "128",
        "--context-length", "262144",
        "--tool-call-parser", "glm47",
        "--reasoning-parser", "glm45",
        "--watchdog-timeout", "1800",
        "--enable-metrics",
        "--extra-metric-labels", json.dumps({"variant": "gathercast"}),
    ]


@pytest.mark.parametrize(
    ("version", "flag"),
    [("0.5.23", "--cuda-graph-max-bs-decode"), ("0.5.15", "--cuda-graph-max-bs-decode")],
)
def test_typical_glm5_launch_parses(version: str, flag: str) -> None:
    spec = load_spec(version)
    assert spec.cuda_graph_max_bs_flag() == flag
    assert spec.check(glm5_launch(flag)) is None


def test_cuda_graph_max_bs_is_ambiguous_on_0523() -> None:
    problem = load_spec("0.5.23").check([*MODEL, "--cuda-graph-max-bs", "64"])
    assert problem is not None
    assert problem.startswith("ambiguous option: --cuda-graph-max-bs could match")
    assert "--cuda-graph-max-bs-decode" in problem
    assert "--cuda-graph-max-bs-prefill" in problem


def test_cuda_graph_max_bs_is_accepted_on_0515_beside_its_new_name() -> None:
    spec = load_spec("0.5.15")
    assert spec.check([*MODEL, "--cuda-graph-max-bs", "64"]) is None
    assert spec.check([*MODEL, "--cuda-graph-max-bs-decode", "64"]) is None


def test_a_release_with_only_the_old_cap_flag_gets_that_flag() -> None:
    spec = ArgSpec(version="0.0.0", parser={},
                   actions=(_action(["--cuda-graph-max-bs"], "cuda_graph_max_bs"),))
    assert spec.cuda_graph_max_bs_flag() == "--cuda-graph-max-bs"


@pytest.mark.parametrize("version", PINNED)
def test_unknown_flag_is_rejected(version: str) -> None:
    assert load_spec(version).check([*MODEL, "--no-such-flag"]) == (
        "unrecognized arguments: --no-such-flag"
    )


@pytest.mark.parametrize("version", PINNED)
def test_invalid_choice_is_rejected(version: str) -> None:
    problem = load_spec(version).check([*MODEL, "--kv-cache-dtype", "fp9"])
    assert problem is not None
    assert problem.startswith("argument --kv-cache-dtype: invalid choice: 'fp9' (choose from ")
    assert "'fp8_e4m3'" in problem


@pytest.mark.parametrize("version", PINNED)
def test_store_true_flag_takes_no_value(version: str) -> None:
    spec = load_spec(version)
    assert spec.check([*MODEL, "--trust-remote-code", "yes"]) == "unrecognized arguments: yes"
    assert spec.check([*MODEL, "--trust-remote-code=yes"]) == (
        "argument --trust-remote-code: ignored explicit argument 'yes'"
    )


@pytest.mark.parametrize("version", PINNED)
def test_value_types_are_enforced(version: str) -> None:
    spec = load_spec(version)
    assert spec.check([*MODEL, "--port", "http"]) == "argument --port: invalid int value: 'http'"
    assert spec.check([*MODEL, "--mem-fraction-static", "most"]) == (
        "argument --mem-fraction-static: invalid float value: 'most'"
    )
    assert spec.check([*MODEL, "--extra-metric-labels", "{not json"]) is not None


@pytest.mark.parametrize("version", PINNED)
def test_aliases_prefixes_and_required_arguments_behave_like_argparse(version: str) -> None:
    spec = load_spec(version)
    assert spec.check(["--model", "/m", "--tensor-parallel-size", "8"]) is None
    assert spec.check([*MODEL, "--tp", "8"]) is None  # unique prefix of --tp-size
    assert spec.check(["--port", "1"]) == (
        "the following arguments are required: --model-path/--model"
    )
    problem = spec.check([*MODEL, "--tp-size"])
    assert problem is not None and problem.endswith(": expected one argument")


@pytest.mark.parametrize("version", PINNED)
def test_help_is_reported_because_sglang_would_exit(version: str) -> None:
    problem = load_spec(version).check([*MODEL, "--help"])
    assert problem is not None and "--help" in problem


def test_knows_matches_exact_option_strings_only() -> None:
    new, old = load_spec("0.5.23"), load_spec("0.5.15")
    assert new.knows("--cuda-graph-max-bs-decode") and not new.knows("--cuda-graph-max-bs")
    assert old.knows("--cuda-graph-max-bs") and old.knows("--cuda-graph-max-bs-decode")
    assert new.knows("--model") and new.knows("--port=30000")
    assert not new.knows("--tp")


def test_cuda_graph_flag_missing_in_both_spellings_is_a_profile_error() -> None:
    spec = ArgSpec(version="0.0.0", parser={}, actions=(_action(["--port"], "port"),))
    with pytest.raises(ProfileError) as raised:
        spec.cuda_graph_max_bs_flag()
    assert raised.value.exit_code == EXIT_USAGE


# --- loading ---------------------------------------------------------------------------------


def test_missing_spec_is_a_profile_error_naming_the_extract_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PROJECT_DIR_ENV, str(tmp_path))
    with pytest.raises(ProfileError) as raised:
        load_spec("0.5.23")
    assert raised.value.exit_code == EXIT_USAGE
    assert "0.5.23" in raised.value.message
    assert "opsctl sglang-args extract --version 0.5.23" in raised.value.hint


def test_unknown_version_is_a_profile_error_listing_the_recorded_ones() -> None:
    with pytest.raises(ProfileError) as raised:
        load_spec("9.9.9")
    assert raised.value.exit_code == EXIT_USAGE
    assert "0.5.23" in raised.value.hint and "0.5.15" in raised.value.hint


@pytest.mark.parametrize("version", ["../../etc", "", "0.5.23/../x"])
def test_a_path_is_not_a_version(version: str) -> None:
    with pytest.raises(ProfileError):
        load_spec(version)


def test_corrupt_spec_is_a_profile_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROJECT_DIR_ENV, str(tmp_path))
    path = tmp_path / RELEASES_DIR / "1.0.0" / "cli-args.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(ProfileError) as raised:
        load_spec("1.0.0")
    assert "sglang-args extract --version 1.0.0" in raised.value.hint


def test_a_rewritten_spec_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROJECT_DIR_ENV, str(tmp_path))
    _write_spec(tmp_path, [_action(["--alpha"], "alpha")])
    assert load_spec("1.0.0").knows("--alpha")
    _write_spec(tmp_path, [_action(["--beta"], "beta"), _action(["--gamma"], "gamma")])
    assert load_spec("1.0.0").knows("--beta")


@pytest.mark.parametrize("version", PINNED)
def test_committed_records_carry_provenance(version: str) -> None:
    record = json.loads((release_dir(version) / "cli-args.json").read_text())
    assert record["sglang_version"] == version
    assert record["format"] == sglang_args.SPEC_FORMAT
    provenance = record["provenance"]
    assert provenance["wheel"].startswith(f"sglang-{version}-")
    assert re.fullmatch(r"[0-9a-f]{64}", provenance["wheel_sha256"])
    assert re.fullmatch(r"[0-9a-f]{64}", provenance["server_args_sha256"])
    assert provenance["extract_command"] == f"opsctl sglang-args extract --version {version}"
    assert record["notes"]


# --- the rebuild itself, on small hand-made parsers --------------------------------------------


def _action(options: list[str], dest: str, kind: str = "store", **fields: Any) -> dict[str, Any]:
    action: dict[str, Any] = {
        "option_strings": options, "dest": dest, "kind": kind, "action_class": "x",
        "nargs": None, "const": None, "type": None, "choices": None, "required": False,
    }
    action.update(fields)
    return action


def _spec(actions: list[dict[str, Any]], **parser: Any) -> ArgSpec:
    return ArgSpec(version="test", parser=parser, actions=tuple(actions))


def _write_spec(root: Path, actions: list[dict[str, Any]]) -> None:
    path = root / RELEASES_DIR / "1.0.0" / "cli-args.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"format": sglang_args.SPEC_FORMAT, "sglang_version": "1.0.0",
              "parser": {"allow_abbrev": True}, "actions": actions}
    path.write_text(json.dumps(record))


def test_allow_abbrev_is_honoured() -> None:
    actions = [_action(["--long-name"], "long_name")]
    assert _spec(actions, allow_abbrev=True).check(["--long", "1"]) is None
    assert _spec(actions, allow_abbrev=False).check(["--long", "1"]) == (
        "unrecognized arguments: --long 1"
    )


def test_action_kinds_are_rebuilt() -> None:
    spec = _spec([
        _action(["--verbose", "-v"], "verbose", "count"),
        _action(["--fast"], "mode", "store_const", const="fast"),
        _action(["--no-cache"], "cache", "store_false"),
        _action(["--include"], "include", "append"),
        _action(["--ids"], "ids", nargs="+", type="int"),
        _action(["--level"], "level", type="int", choices=[0, 1, 2]),
        _action(["--opt"], "opt", nargs="?", const="dflt"),
        _action(["--color", "--no-color"], "color", "boolean_optional", nargs=0),
    ])
    assert spec.check(["-vv", "--fast", "--no-cache", "--include", "a", "--include", "b",
                       "--ids", "1", "2", "--level", "2", "--opt", "--no-color"]) is None
    assert spec.check(["--fast", "x"]) == "unrecognized arguments: x"
    assert spec.check(["--ids"]) == "argument --ids: expected at least one argument"
    assert spec.check(["--ids", "one"]) == "argument --ids: invalid int value: 'one'"
    assert spec.check(["--level", "3"]) == (
        "argument --level: invalid choice: 3 (choose from 0, 1, 2)"
    )


def test_retired_flag_with_an_error_message_is_an_error() -> None:
    retired = _action(["--old"], "old", "custom", nargs=0,
                      extra={"error_message": "--old is gone; use --new"})
    warned = _action(["--legacy"], "legacy", "custom", nargs=0, extra={"new_flag": "--new"})
    spec = _spec([retired, warned])
    assert spec.check(["--old"]) == "--old is gone; use --new"
    assert spec.check(["--legacy"]) is None
    assert spec.check(["--legacy", "x"]) == "unrecognized arguments: x"


def test_mutually_exclusive_groups_are_rebuilt() -> None:
    spec = _spec(
        [
            _action(["--a"], "a", "store_true", nargs=0),
            _action(["--b"], "b", "store_true", nargs=0),
        ],
        mutually_exclusive_groups=[{"required": False, "actions": [0, 1]}],
    )
    assert spec.check(["--a"]) is None
    assert spec.check(["--a", "--b"]) == "argument --b: not allowed with argument --a"


def test_positionals_are_rebuilt() -> None:
    spec = _spec([_action([], "model"), _action(["--port"], "port", type="int")])
    assert spec.check(["/m", "--port", "1"]) is None
    assert spec.check(["--port", "1"]) == "the following arguments are required: model"
