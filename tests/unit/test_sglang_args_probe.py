"""The extraction probe and its helpers, on a small fake sglang (no network, no real wheel).

The fake imports heavy modules the way sglang does (subclassing, decorating, probing, version
checks), so these tests pin down each placeholder rule the real wheels need.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from opsctl.argspec.extract import (
    SERVER_ARGS,
    _Stage,
    _tag_options,
    build_notes,
    pinned_versions,
    run_probe,
)
from opsctl.argspec.spec import ArgSpec
from opsctl.core import wheels
from opsctl.core.errors import BuildError

FAKE_SERVER_ARGS = '''
import argparse
import os
from abc import ABC

import torch
import torch.nn as nn
import transformers
import triton
from transformers import AutoProcessor, PretrainedConfig

# Each line below broke a naive catch-all placeholder.
device = triton.runtime.driver.active.get_current_target().backend
device_lib = getattr(torch, device)
REDUCE_SUM = int(torch.distributed.ReduceOp.SUM)
assert torch.__version__ == "2.9.1"
assert transformers.__version__.startswith("0.0.0")
assert getattr(PretrainedConfig, "__get_pydantic_core_schema__", None) is None


class FusedOp(nn.Module, ABC):
    def __init__(self, width):
        self.width = width


assert FusedOp(3).width == 3


class Kwargs(transformers.ProcessingKwargs, total=False):
    pass


AutoProcessor.register(PretrainedConfig, FusedOp)


@torch.compile
def double(x):
    return 2 * x


assert double(3) == 6

try:
    import msvcrt  # a platform probe must fail as it does on Linux
    ON_WINDOWS = True
except ImportError:
    ON_WINDOWS = False
assert not ON_WINDOWS

MODES = ["fast", "safe"]
if os.environ.get("FAKE_EXTRA_MODE"):
    MODES.append("extra")


class Retired(argparse.Action):
    def __init__(self, option_strings, dest, error_message=None, nargs=0, **kwargs):
        self.error_message = error_message
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(self.error_message)


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", type=str, required=True)
        parser.add_argument("--tp-size", type=int, default=1)
        parser.add_argument("--cuda-graph-max-bs-decode", type=int)
        parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
        parser.add_argument("--sampler", choices={"torch", "flashinfer", "aiter"})
        parser.add_argument("--mode", choices=MODES)
        parser.add_argument("--dtype", choices=[torch.float16, "auto"])
        parser.add_argument("--device", default=torch.device("cuda"))
        parser.add_argument("--trust-remote-code", action="store_true")
        parser.add_argument("--gone", action=Retired, error_message="--gone was removed")
'''


@pytest.fixture
def fake_stage(tmp_path: Path) -> _Stage:
    source = tmp_path / "wheel"
    server_args = source / SERVER_ARGS
    server_args.parent.mkdir(parents=True)
    for package in (source / "sglang", source / "sglang" / "srt"):
        (package / "__init__.py").write_text("")
    # The real sglang/__init__.py patches transformers; the probe must not run it.
    (source / "sglang" / "__init__.py").write_text("raise RuntimeError('__init__ ran')\n")
    server_args.write_text(FAKE_SERVER_ARGS)
    metadata = source / "sglang-1.0.0.dist-info" / "METADATA"
    metadata.parent.mkdir()
    metadata.write_text(textwrap.dedent("""\
        Name: sglang
        Requires-Dist: torch==2.9.1
        Requires-Dist: flashinfer_python==0.6.3
        Requires-Dist: numpy
        Requires-Dist: av==16.1.0; sys_platform == "darwin"
        Requires-Dist: checkpoint-engine==0.1.2; extra == "checkpoint-engine"
        """))
    deps = tmp_path / "deps"
    deps.mkdir()
    return _Stage(tmp_path / "sglang-1.0.0-py3-none-any.whl", source, deps,
                  pinned_versions(source, "1.0.0"))


def test_pins_are_the_unconditional_exact_requirements(fake_stage: _Stage) -> None:
    assert fake_stage.pins == {"flashinfer_python": "0.6.3", "torch": "2.9.1"}


def test_probe_imports_through_placeholders_and_dumps_the_parser(fake_stage: _Stage) -> None:
    dump = run_probe(fake_stage)
    assert {"torch", "transformers", "triton"} <= set(dump["placeholder_modules"])
    assert "msvcrt" not in dump["placeholder_modules"]
    by_flag = {action["option_strings"][0]: action for action in dump["actions"]}
    assert by_flag["--model-path"]["option_strings"] == ["--model-path", "--model"]
    assert by_flag["--model-path"]["required"] is True
    assert by_flag["--tp-size"]["type"] == "int"
    assert by_flag["--trust-remote-code"]["kind"] == "store_true"
    # A set of choices is recorded sorted, so the JSON does not depend on hash seeds.
    assert by_flag["--sampler"]["choices"] == ["aiter", "flashinfer", "torch"]
    assert by_flag["--sampler"]["choices_unordered"] is True
    # The probe ran with a clean environment, whatever the caller's.
    assert by_flag["--mode"]["choices"] == ["fast", "safe"]
    assert by_flag["--dtype"]["choices"][0] == {"placeholder": "torch.float16"}
    assert by_flag["--gone"]["kind"] == "custom"
    assert by_flag["--gone"]["extra"] == {"error_message": "--gone was removed"}
    assert "default" not in by_flag["--device"]


def test_probe_environment_is_clean(fake_stage: _Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_EXTRA_MODE", "1")
    by_flag = {a["option_strings"][0]: a for a in run_probe(fake_stage)["actions"]}
    assert by_flag["--mode"]["choices"] == ["fast", "safe"]


def test_rebuilt_parser_agrees_with_the_real_one(fake_stage: _Stage, tmp_path: Path) -> None:
    argvs = [
        ["--model", "/m"],
        ["--model-path", "/m", "--cuda-graph-max-bs", "8"],
        ["--model-path", "/m", "--mode", "slow"],
        ["--model-path", "/m", "--trust-remote-code", "yes"],
        ["--model-path", "/m", "--tp-size", "x"],
        ["--model-path", "/m", "--gone"],
        ["--tp-size", "2"],
    ]
    argvs_file = tmp_path / "argvs.json"
    argvs_file.write_text(__import__("json").dumps(argvs))
    dump = run_probe(fake_stage, argvs_file)
    spec = ArgSpec(version="1.0.0", parser=dump["parser"], actions=tuple(dump["actions"]))
    assert dump["parse_results"][0] is None
    assert dump["parse_results"][1].startswith("ambiguous option: --cuda-graph-max-bs")
    assert dump["parse_results"][5] == "--gone was removed"
    assert [spec.check(argv) for argv in argvs] == dump["parse_results"]


def test_notes_name_placeholders_and_computed_choices(fake_stage: _Stage) -> None:
    dump = run_probe(fake_stage)
    notes = build_notes(dump, fake_stage.source_dir / SERVER_ARGS)
    text = "\n".join(notes)
    assert "torch" in text and "transformers" in text
    assert "--dtype: choices contain values of a placeholder module" in text
    # An UPPER_CASE constant is taken as written out, unless this file mutates it.
    mode = next(note for note in notes if note.startswith("--mode:"))
    assert 'if os.environ.get("FAKE_EXTRA_MODE"): MODES.append("extra")' in mode
    assert not any(note.startswith(("--sampler:", "--tp-size:")) for note in notes)


def test_computed_choices_are_traced_to_their_code(tmp_path: Path) -> None:
    server_args = tmp_path / SERVER_ARGS
    server_args.parent.mkdir(parents=True)
    server_args.write_text(textwrap.dedent("""\
        class ServerArgs:
            @staticmethod
            def add_cli_args(parser):
                backends = set(BASE_BACKENDS)
                if envs.EXTRA.get():
                    backends.add("oracle")
                parser.add_argument("--backend", choices=backends)
                parser.add_argument("--parser", choices=["auto"] + list(REGISTRY.keys()))
                parser.add_argument("--level", choices=[0, 1])
        """))
    notes = build_notes({"placeholder_modules": [], "actions": []}, server_args)
    backend = next(note for note in notes if note.startswith("--backend:"))
    assert "if envs.EXTRA.get(): backends.add(\"oracle\")" in backend
    assert re.search(r"\[sglang/srt/server_args\.py:7\]\.$", backend)
    assert any(note.startswith("--parser:") for note in notes)
    assert not any(note.startswith("--level:") for note in notes)


def test_a_failing_import_is_a_build_error(fake_stage: _Stage) -> None:
    (fake_stage.source_dir / SERVER_ARGS).write_text("import sglang.srt.missing_module\n")
    with pytest.raises(BuildError) as raised:
        run_probe(fake_stage)
    assert "missing_module" in raised.value.message


@pytest.mark.parametrize(
    ("wheel", "options"),
    [
        ("sglang-0.5.15-py3-none-any.whl", []),
        (
            "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
            ["--platform", "manylinux_2_34_x86_64", "--abi", "cp311",
             "--implementation", "cp", "--python-version", "3.11"],
        ),
    ],
)
def test_recorded_wheel_tags_become_pip_options(wheel: str, options: list[str]) -> None:
    match = wheels.WHEEL_NAME.match(wheel)
    assert match is not None
    assert _tag_options(match) == options
