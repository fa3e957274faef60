"""Dump the real sglang argument parser as JSON. Runs ONLY as a script, in a clean subprocess.

`opsctl sglang-args extract` starts `python -S -I <this file> <sglang dir> <deps dir> <pins>`:
no site packages, no opsctl, nothing from the caller's environment. This file therefore imports
the stdlib only. It puts the unpacked sglang wheel and a directory of small real dependencies
(msgspec, packaging, typing_extensions) on sys.path, lets every other missing third-party module
(torch, triton, transformers, ...) import as an inert placeholder, imports the real
`sglang.srt.server_args.ServerArgs`, calls `ServerArgs.add_cli_args(argparse.ArgumentParser())`
exactly as sglang's `prepare_server_args` does, and prints `parser._actions` as JSON on stdout.
An optional fourth argument names a JSON list of argvs to parse with that real parser; the
verdicts come back as `parse_results` (tests compare them with `ArgSpec.check`).

Placeholders only have to survive import time: sglang's flag definitions are plain data, but the
modules that define them import heavy packages at top level and sometimes subclass, decorate or
probe what they import. Each rule below answers one such use seen in a release opsctl pinned:
  * an attribute of a placeholder module is a placeholder CLASS, so it can be subclassed (also
    next to ABC: the metaclass derives from ABCMeta; class keywords like `total=False` are
    swallowed), used in isinstance(), in `X | None`, in typing.Optional[X], and as a registry
    (`AutoProcessor.register(...)`, `CONFIG_MAPPING[...] = ...`);
  * dunder lookups raise AttributeError, so protocol probes such as pydantic's
    `getattr(cls, "__get_pydantic_core_schema__", None)` see "absent", not a bogus object;
  * calling a placeholder with exactly one function returns that function, so decorators
    (`@torch.compile`, `@triton.jit`) leave the decorated function intact;
  * a module's `__version__` is a version string (see _PLACEHOLDER_VERSION), and
    `int(torch.distributed.ReduceOp.SUM)` is 0;
  * a placeholder instance is also a `str` (its dotted name), so `getattr(torch, device)` with a
    placeholder `device` still works;
  * stdlib names and imports made BY the stdlib are never placeholders (`msvcrt`, copy.py's
    `org.python.core`), so platform probes fail as they do on Linux.
`sglang/__init__.py` is not run: it patches transformers through private attributes
(`PretrainedConfig.__class_validators__`) that no placeholder can honestly provide, and it only
assembles the frontend API.
"""

from __future__ import annotations

import abc
import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import types
from typing import Any

# Version strings are compared at import time (`version.parse(torch.__version__) >= ...`).
# A placeholder reports the version the wheel pins with `==` in its metadata (passed in by the
# caller), else a PEP 440 local version below every release.
_PLACEHOLDER_VERSION = "0.0.0+opsctl.placeholder"
_STDLIB_DIR = os.path.dirname(os.__file__)

# argparse's own action classes, by the kind name the JSON uses.
_KINDS = {
    argparse._StoreAction: "store",
    argparse._StoreTrueAction: "store_true",
    argparse._StoreFalseAction: "store_false",
    argparse._StoreConstAction: "store_const",
    argparse._AppendAction: "append",
    argparse._AppendConstAction: "append_const",
    argparse._CountAction: "count",
    argparse._ExtendAction: "extend",
    argparse._HelpAction: "help",
    argparse._VersionAction: "version",
    argparse.BooleanOptionalAction: "boolean_optional",
}
_TYPE_NAMES = {str: "str", int: "int", float: "float"}
# Attributes every argparse.Action has (`deprecated` from Python 3.13 on); anything else a custom
# action stores (sglang's `new_flag`, `error_message`, ...) is recorded as `extra`.
_STANDARD_ATTRS = {
    "option_strings", "dest", "nargs", "const", "default", "type", "choices", "required",
    "help", "metavar", "container", "deprecated",
}


class _PlaceholderMeta(abc.ABCMeta):
    """Metaclass of placeholder classes: unknown attributes are further placeholder classes."""

    # Class keywords meant for the real base (`class K(ProcessingKwargs, total=False)`).
    def __new__(mcls, name: str, bases: tuple, namespace: dict, **kwargs: Any) -> Any:
        return super().__new__(mcls, name, bases, namespace)

    def __init__(cls, name: str, bases: tuple, namespace: dict, **kwargs: Any) -> None:
        super().__init__(name, bases, namespace)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        # Kept, so `torch.nn.Module` is one class for both `class X(...)` and isinstance().
        value = _placeholder_class(f"{cls.__qualname__}.{name}")
        setattr(cls, name, value)
        return value

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not cls.__dict__.get("_opsctl_placeholder", False):
            # A real class that subclassed a placeholder: construct it normally.
            return super().__call__(*args, **kwargs)
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType):
            return args[0]
        return _PlaceholderValue(cls.__qualname__)

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __setitem__(cls, key: Any, value: Any) -> None:
        return None

    def __contains__(cls, item: Any) -> bool:
        return False

    def register(cls, *args: Any, **kwargs: Any) -> Any:
        # ABCMeta.register would shadow registries like `AutoProcessor.register(cfg, proc)`.
        if not cls.__dict__.get("_opsctl_placeholder", False):
            return super().register(*args, **kwargs)
        return args[0] if args else cls

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return True

    # Module-level constants such as `int(torch.distributed.ReduceOp.SUM)`.
    def __int__(cls) -> int:
        return 0

    def __index__(cls) -> int:
        return 0

    def __float__(cls) -> float:
        return 0.0


class _PlaceholderValue(str):
    """What calling a placeholder returns: a str (its name) that tolerates attribute access."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _PlaceholderValue(f"{self}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType):
            return args[0]
        return _PlaceholderValue(f"{self}()")


def _placeholder_class(qualname: str) -> type:
    cls = _PlaceholderMeta(qualname.rsplit(".", 1)[-1], (), {"_opsctl_placeholder": True})
    cls.__qualname__ = qualname
    cls.__module__ = qualname.split(".", 1)[0]
    return cls


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _placeholder_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: whatever the real finders could not find becomes a placeholder."""

    def __init__(self, versions: dict[str, str]) -> None:
        self.versions = versions
        self.top_levels: set[str] = set()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top = fullname.split(".", 1)[0]
        if top == "sglang":
            # A missing sglang module is a real error in the wheel or in this probe.
            return None
        if top in sys.stdlib_module_names or _imported_by_stdlib():
            # Platform probes (`msvcrt`, `_winapi`, `org.python.core` in copy.py) must fail
            # exactly as they do on Linux.
            return None
        self.top_levels.add(top)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        top = spec.name.split(".", 1)[0]
        module.__dict__["__version__"] = self.versions.get(top, _PLACEHOLDER_VERSION)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _imported_by_stdlib() -> bool:
    """Whether the import statement being served sits in a stdlib module."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    return filename.startswith(_STDLIB_DIR + os.sep) and "site-packages" not in filename


def _jsonable(value: Any) -> Any:
    """Plain JSON data, or a tagged repr for anything else (so the output is deterministic)."""
    if value is None or isinstance(value, bool | int | float) and not isinstance(value, type):
        return value
    if isinstance(value, _PlaceholderValue | _PlaceholderMeta):
        # Derived from a module that is not really installed here: never a trustworthy value.
        return {"placeholder": str(value) if isinstance(value, str) else value.__qualname__}
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _jsonable(item) for key, item in value.items()}
    return {"repr": repr(value)}


def _callable_name(func: Any) -> str:
    module = getattr(func, "__module__", None) or "?"
    return f"{module}.{getattr(func, '__qualname__', repr(func))}"


def _choices(action: argparse.Action) -> tuple[list[Any] | None, bool]:
    """(choices as a list, whether sglang gave them unordered). Sets are sorted for stable JSON."""
    choices = action.choices
    if choices is None:
        return None, False
    if isinstance(choices, set | frozenset):
        return sorted((_jsonable(item) for item in choices), key=str), True
    return [_jsonable(item) for item in choices], False


def _describe(action: argparse.Action) -> dict[str, Any]:
    kind = _KINDS.get(type(action), "custom")
    if action.type is None:
        type_name = None
    elif action.type in _TYPE_NAMES:
        type_name = _TYPE_NAMES[action.type]
    else:
        type_name = "custom:" + _callable_name(action.type)
    nargs = action.nargs
    choices, unordered = _choices(action)
    described: dict[str, Any] = {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "kind": kind,
        "action_class": _callable_name(type(action)),
        "nargs": nargs if nargs is None or isinstance(nargs, int | str) else repr(nargs),
        "const": _jsonable(action.const),
        "type": type_name,
        "choices": choices,
        "required": bool(action.required),
    }
    if unordered:
        described["choices_unordered"] = True
    extra = {
        key: _jsonable(value)
        for key, value in sorted(vars(action).items())
        if key not in _STANDARD_ATTRS and not key.startswith("_")
    }
    if extra:
        described["extra"] = extra
    return described


def _register_bare_sglang_package(sglang_dir: str) -> None:
    """Make `sglang` importable without running its `__init__.py`.

    That file only assembles the frontend API and patches transformers (reading private
    attributes of its classes); none of it shapes the server's parser, and a placeholder
    `transformers` cannot satisfy those patches.
    """
    spec = importlib.machinery.ModuleSpec("sglang", None, is_package=True)
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [os.path.join(sglang_dir, "sglang")]
    sys.modules["sglang"] = package


class _ParseFailed(Exception):
    pass


class _ReportingParser(argparse.ArgumentParser):
    """The real parser, but errors (and --help's exit) come back as a message, not an exit."""

    def error(self, message: str) -> Any:
        raise _ParseFailed(message)

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise _ParseFailed((message or f"parser exited with status {status}").strip())

    def print_help(self, file: Any = None) -> None:
        return None


def _parse_with_real_parser(server_args: Any, argvs: list[list[str]]) -> list[str | None]:
    """argparse's verdict on each argv, from sglang's own parser (tests compare ArgSpec.check)."""
    results: list[str | None] = []
    # parse_args leaves the parser as it was, so one parser serves every argv.
    parser = _ReportingParser()
    server_args.add_cli_args(parser)
    for argv in argvs:
        try:
            parser.parse_args(argv)
        except _ParseFailed as exc:
            results.append(" ".join(str(exc).split()))
        else:
            results.append(None)
    return results


def main(sglang_dir: str, deps_dir: str, versions_json: str, argvs_file: str | None) -> int:
    sys.path[:0] = [sglang_dir, deps_dir]
    finder = _PlaceholderFinder(json.loads(versions_json))
    sys.meta_path.append(finder)
    _register_bare_sglang_package(sglang_dir)

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    groups = [
        {
            "required": bool(group.required),
            "actions": [parser._actions.index(action) for action in group._group_actions],
        }
        for group in parser._mutually_exclusive_groups
    ]
    dump: dict[str, Any] = {
        "parser": {
            "allow_abbrev": parser.allow_abbrev,
            "prefix_chars": parser.prefix_chars,
            "fromfile_prefix_chars": parser.fromfile_prefix_chars,
            "mutually_exclusive_groups": groups,
        },
        "actions": [_describe(action) for action in parser._actions],
        "placeholder_modules": sorted(finder.top_levels),
    }
    if argvs_file:
        with open(argvs_file) as handle:
            dump["parse_results"] = _parse_with_real_parser(ServerArgs, json.load(handle))
    json.dump(dump, sys.stdout, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(
        main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    )
