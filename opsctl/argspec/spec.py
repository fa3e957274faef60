"""The pinned sglang's own argument parser, rebuilt from `patches/sglang/<version>/cli-args.json`.

The JSON is extracted from the real sglang wheel by `opsctl sglang-args extract` (see
`sglang_args_extract.py`) and committed; nothing here is a hand-kept flag list. `ArgSpec.check`
replays argparse on a rendered argv, so a renamed or removed flag (sglang 0.5.23 split
`--cuda-graph-max-bs` into `-decode`/`-prefill`, which makes the old spelling an argparse
"ambiguous option") is reported before anything starts.

Stdlib only (plus opsctl.core.errors/paths): profiles.py imports this on every command.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opsctl.core.errors import ProfileError
from opsctl.core.paths import RELEASES_DIR, release_dir

SPEC_FILE = "cli-args.json"
SPEC_FORMAT = 1
# \Z, not $: $ also matches before a trailing newline; 64 characters at most (a path part).
VERSION_RE = re.compile(r"\A[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}\Z")

# Value converters the JSON may name. A custom sglang type function (e.g. json_list_type) is not
# importable here, so such values are checked as plain strings (argparse's default).
_TYPES: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "custom:json.loads": json.loads,
}


def spec_path(version: str) -> Path:
    return release_dir(version) / SPEC_FILE


def extract_hint(version: str) -> str:
    return (
        f"run `opsctl sglang-args extract --version {version}` and commit "
        f"{RELEASES_DIR}/{version}/{SPEC_FILE}"
    )


class _ParseFailed(Exception):
    """argparse wanted to exit; carries its one-line message."""


class _CheckingParser(argparse.ArgumentParser):
    """An ArgumentParser that reports instead of printing and exiting."""

    def error(self, message: str) -> Any:
        raise _ParseFailed(message)

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise _ParseFailed((message or f"parser exited with status {status}").strip())


class _Consume(argparse.Action):
    """Stand-in for sglang's custom actions (and help): takes the recorded nargs, stores nothing.

    Only what argparse does BEFORE an action runs (matching, nargs, type, choices) decides
    whether an argv parses; a recorded `error_message` (sglang's retired-flag action) is the one
    behaviour replayed, because the real action turns it into a parser error.
    """

    def __init__(
        self, *args: Any, error_message: str | None = None, exits: bool = False, **kwargs: Any
    ) -> None:
        self.error_message = error_message
        self.exits = exits
        super().__init__(*args, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if self.error_message:
            parser.error(self.error_message)
        if self.exits:
            # --help/--version print and exit: a server launched with them never serves.
            parser.error(
                f"argument {option_string}: makes sglang print and exit instead of serving"
            )


@dataclass(frozen=True)
class ArgSpec:
    """One pinned sglang version's parser, as recorded by the extractor."""

    version: str
    parser: dict[str, Any]
    actions: tuple[dict[str, Any], ...]

    def option_strings(self) -> frozenset[str]:
        return frozenset(opt for action in self.actions for opt in action["option_strings"])

    def knows(self, flag: str) -> bool:
        """Whether `flag` (optionally `--flag=value`) is an exact option string of the parser."""
        return flag.split("=", 1)[0] in self.option_strings()

    def cuda_graph_max_bs_flag(self) -> str:
        """The flag that caps the decode CUDA-graph batch size in this version."""
        for flag in ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"):
            if self.knows(flag):
                return flag
        raise ProfileError(
            f"sglang {self.version} has neither --cuda-graph-max-bs-decode nor --cuda-graph-max-bs",
            hint="leave server.cuda_graph_max_bs unset, or pass the new flag through extra_args",
        )

    def check(self, argv: Sequence[str]) -> str | None:
        """Parse argv (no entrypoint) like sglang would; argparse's one-line error, or None."""
        try:
            self._parser.parse_args(list(argv))
        except _ParseFailed as exc:
            return " ".join(str(exc).split())
        return None

    @functools.cached_property
    def _parser(self) -> argparse.ArgumentParser:
        """Built once per recorded version (a few thousand add_argument calls, 0.2 s, were paid
        again for every variant of every profile load); parse_args leaves it unchanged."""
        return self._build_parser()

    def _build_parser(self) -> argparse.ArgumentParser:
        parser = _CheckingParser(
            prog="sglang",
            add_help=False,
            allow_abbrev=bool(self.parser.get("allow_abbrev", True)),
            prefix_chars=str(self.parser.get("prefix_chars", "-")),
            fromfile_prefix_chars=self.parser.get("fromfile_prefix_chars"),
        )
        group_of: dict[int, Any] = {}
        for group in self.parser.get("mutually_exclusive_groups", []):
            container = parser.add_mutually_exclusive_group(required=bool(group["required"]))
            for index in group["actions"]:
                group_of[index] = container
        for index, action in enumerate(self.actions):
            _add_action(group_of.get(index, parser), action)
        return parser


def _add_action(container: Any, action: dict[str, Any]) -> None:
    kind = action["kind"]
    options = list(action["option_strings"])
    names = options or [action["dest"]]
    kwargs: dict[str, Any] = {}
    if options:
        kwargs["dest"] = action["dest"]
        kwargs["required"] = bool(action["required"])
    if kind in {"store_true", "store_false", "count"}:
        container.add_argument(*names, action=kind, **kwargs)
        return
    if kind in {"store_const", "append_const"}:
        container.add_argument(*names, action=kind, const=action["const"], **kwargs)
        return
    if action["choices"] is not None:
        kwargs["choices"] = action["choices"]
    converter = _TYPES.get(action["type"] or "")
    if converter is not None:
        kwargs["type"] = converter
    nargs = action["nargs"]
    if kind in {"store", "append", "extend"}:
        if nargs is not None:
            kwargs["nargs"] = nargs
        if nargs == "?":
            kwargs["const"] = action["const"]
        container.add_argument(*names, action=kind, **kwargs)
        return
    # help, version, boolean_optional (its --no- spellings are recorded already) and sglang's
    # own action classes: only the recorded nargs matters for parsing.
    extra = action.get("extra") or {}
    error_message = extra.get("error_message")
    container.add_argument(
        *names,
        action=_Consume,
        nargs=0 if kind in {"help", "version", "boolean_optional"} else nargs,
        error_message=error_message if isinstance(error_message, str) else None,
        exits=kind in {"help", "version"},
        **kwargs,
    )


def load_spec(version: str) -> ArgSpec:
    """The recorded parser of sglang `version`; ProfileError (exit 2) if none is committed."""
    if not VERSION_RE.match(version):
        raise ProfileError(
            f"{version!r} is not a sglang version", hint="use a release such as 0.5.23"
        )
    path = spec_path(version)
    if not path.is_file():
        known = sorted(p.parent.name for p in path.parent.parent.glob(f"*/{SPEC_FILE}"))
        raise ProfileError(
            f"no recorded sglang argument parser for version {version} ({path} is missing)",
            hint=extract_hint(version) + (f"; recorded: {', '.join(known)}" if known else ""),
        )
    stat = path.stat()
    return _read_spec(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _read_spec(path: str, mtime_ns: int, size: int) -> ArgSpec:
    # mtime and size are part of the key so a re-extracted file is never served stale.
    try:
        data = json.loads(Path(path).read_text())
        if data.get("format") != SPEC_FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {SPEC_FORMAT}")
        return ArgSpec(
            version=str(data["sglang_version"]),
            parser=dict(data["parser"]),
            actions=tuple(data["actions"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        version = Path(path).parent.name
        raise ProfileError(
            f"{path} is not a valid sglang argument record: {exc}", hint=extract_hint(version)
        ) from None
