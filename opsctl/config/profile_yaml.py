"""Reading a profile's YAML strictly, and naming the line of any field an error is about.

Kept apart from the models (profiles.py): every profile error says `file:line: field.path:
reason`, so the loader records the line of every key as it parses, refuses duplicate keys
(PyYAML would silently keep the last one) and turns pydantic's locations into lines.

A profile is small and hand-written, so anything else is refused before it costs memory or
time: a file over 1 MiB, text that is not UTF-8, nesting deeper than 64 levels, more than 64
aliases, a recursive alias, or aliases that would expand the document past 100,000 nodes (the
"billion laughs" of a few hundred bytes). YAML merge keys (`<<: *base`) work.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from opsctl.core.errors import ProfileError
from opsctl.core.files import open_regular

# (key, key, ...) -> 1-based line of that key in the file.
Lines = dict[tuple, int]
MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_ALIASES = 64
MAX_NODES = 100_000
_MERGE_TAG = "tag:yaml.org,2002:merge"
SCHEMA_HINT = "`opsctl profile schema` prints the schema"
DUPLICATE_KEY = "duplicate key"  # opsctl's own problem: it names a key, never a value


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue  # `<<: *base`: merged below; the mapping's own keys override what it merges
        if not isinstance(key_node, yaml.ScalarNode):  # `? [a, b]`: unhashable, no profile key
            raise yaml.constructor.ConstructorError(
                None, None, "mapping keys must be scalars, not a list or a mapping",
                key_node.start_mark)
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None,
                f"{DUPLICATE_KEY} {key!r} (first at line {seen[key]})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line + 1
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)  # flattens merge keys


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_profile(path: Path) -> str:
    """The profile's text: ProfileError (exit 2, one line) for a directory, an unreadable or
    oversized file, or bytes that are not UTF-8."""
    try:
        if path.is_dir():
            raise ProfileError(f"{path} is a directory, not a profile file",
                               hint="pass a YAML file or a profile name")
        with open_regular(path, "profile") as handle:  # a FIFO blocked `open` forever
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ProfileError(f"cannot read {path}: {exc.strerror or exc}",
                           hint="check the path and its permissions") from None
    if len(data) > MAX_BYTES:
        raise ProfileError(f"{path} is larger than {MAX_BYTES >> 20} MiB; no profile is",
                           hint="pass the profile's YAML file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ProfileError(f"{path}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x})",
                           hint="save the profile as UTF-8") from None


def _check_shape(path: Path, text: str) -> None:
    """Depth and alias count from the event stream (PyYAML's parser does not recurse, its
    composer does, so this runs before anything is composed)."""
    depth = aliases = 0
    for event in yaml.parse(text, Loader=_StrictLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _shape_error(path, event, f"nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise _shape_error(path, event, f"more than {MAX_ALIASES} aliases")


def _shape_error(path: Path, event: yaml.Event | yaml.Node, why: str) -> ProfileError:
    mark = event.start_mark
    return ProfileError(f"{path}:{mark.line + 1 if mark else '?'}: refused: {why}",
                        hint="a profile is a small hand-written file; write the values out")


def _check_expansion(path: Path, root: yaml.Node) -> None:
    """Refuse a recursive alias, and aliases that expand the document past MAX_NODES nodes."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, Iterator[yaml.Node] | None]] = [(root, None)]
    while stack:
        node, children = stack.pop()
        if children is None:  # first visit
            if id(node) in size:
                continue
            if id(node) in on_path:
                raise _shape_error(path, node, "a recursive alias")
            on_path.add(id(node))
            kids = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) \
                else list(node.value) if isinstance(node, yaml.SequenceNode) else []
            stack.append((node, iter(kids)))
            stack.extend((kid, None) for kid in reversed(kids) if id(kid) not in size)
            continue
        on_path.discard(id(node))
        size[id(node)] = 1 + sum(size.get(id(kid), 0) for kid in children)
        if size[id(node)] > MAX_NODES:
            raise _shape_error(path, node, f"aliases expand it past {MAX_NODES:,} nodes")


def parse_yaml(path: Path, text: str) -> tuple[Any, Lines]:
    """The document and the line of every key; ProfileError naming file:line on bad YAML."""
    try:
        _check_shape(path, text)
        node = yaml.compose(text, Loader=_StrictLoader)
        if node is not None:
            _check_expansion(path, node)
        loader = _StrictLoader(text)
        try:
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ProfileError(f"{where}: invalid YAML: {yaml_problem(exc, at=False)}",
                           hint="fix the YAML syntax") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile must be a YAML mapping", hint="see deploy/sim.yaml")
    lines: Lines = {}
    if node is not None:
        _index_lines(node, (), lines)
    return data, lines


# What PyYAML quotes from the document in a problem: an alias, a tag, an anchor, a scalar
# ('...'); kept only when it names a token class ('<scalar>') or a character or two ('\\t').
_QUOTED = re.compile(r"'(?P<text>[^'\n]{0,200})'")


def yaml_problem(exc: yaml.YAMLError, *, at: bool = True) -> str:
    """What is wrong, and where (line and column), without the text of the line: PyYAML's own
    message prints the offending line, and quotes aliases and tags from it, any of which may be
    a password (`password: *hunter2` is "found undefined alias 'hunter2'")."""
    problem = str(getattr(exc, "problem", None) or getattr(exc, "context", None) or "not YAML")
    if problem.startswith(DUPLICATE_KEY):
        return problem
    problem = _QUOTED.sub(lambda m: m[0] if m["text"].startswith("<") or len(m["text"]) <= 2
                          else "'...'", problem)
    mark = getattr(exc, "problem_mark", None)
    if not (at and mark):
        return problem
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"


def _index_lines(node: yaml.Node, loc: tuple, lines: Lines) -> None:
    # A key's own line wins over the line its (block) value starts on.
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            child = (*loc, key_node.value)
            lines[child] = key_node.start_mark.line + 1
            _index_lines(value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, (*loc, index), lines)


def line_for(loc: tuple, lines: Lines) -> int | None:
    """The line of `loc`, or of its nearest parent that the file has (a missing key has none)."""
    for end in range(len(loc), -1, -1):
        key = tuple(str(p) if not isinstance(p, int) else p for p in loc[:end])
        if key in lines:
            return lines[key]
    return None


def where(path: Path, loc: tuple, lines: Lines) -> str:
    """`file:line` of a location (just `file` when no line is known)."""
    line = line_for(loc, lines)
    return f"{path}:{line}" if line else str(path)


def schema_problems(path: Path, lines: Lines, exc: ValidationError, prefix: tuple,
                    model: type[BaseModel]) -> list[ProfileError]:
    """Every complaint of pydantic's about `model` (validated at `prefix` of the file), each as
    `file:line: field.path: reason`; a key the model does not know names the one it most likely
    meant ("did you mean 'max_running_requests'?", by difflib)."""
    problems = []
    for error in exc.errors():
        loc = (*prefix, *error["loc"])
        field = ".".join(str(part) for part in loc) or "(top level)"
        text = f"{where(path, loc, lines)}: {field}: {error['msg']}"
        if error["type"] == "extra_forbidden" and error["loc"]:
            guess = difflib.get_close_matches(str(error["loc"][-1]),
                                              known_keys(model, error["loc"][:-1]), n=1)
            text += f"; did you mean {guess[0]!r}?" if guess else ""
        problems.append(ProfileError(text, hint=SCHEMA_HINT))
    return problems


def all_at_once(problems: list[ProfileError]) -> ProfileError:
    """One error for every problem found: the first as its message, all of them (each with its
    hint) listed above it when there are several."""
    first = problems[0]
    if len(problems) == 1:
        return first
    listed = [problem.message + (f" (hint: {problem.hint})"
                                 if problem.hint and problem.hint != first.hint else "")
              for problem in problems]
    return ProfileError(f"{first.message} (and {len(problems) - 1} more problem(s) in the "
                        "profile, listed above)", hint=first.hint, details=listed)


def known_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys a mapping at `loc` inside `model` may hold (its model's fields), [] when `loc`
    is not a model's place."""
    current: list[Any] = [model]
    for part in loc:
        current = [step for annotation in current for step in _inside(annotation, part)]
    return sorted({name for annotation in current for found in _models(annotation)
                   for name in found.model_fields})


def _inside(annotation: Any, part: Any) -> list[Any]:
    """What sits at `part` of a value of `annotation`: a model's field, else (a list index, a
    mapping's key, a union's member) the type's arguments."""
    fields = [found.model_fields[part].annotation for found in _models(annotation)
              if isinstance(part, str) and part in found.model_fields]
    return fields or list(get_args(annotation))


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation names (itself, or inside an Optional or a union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = get_origin(annotation)
    if origin is Union or origin is UnionType:
        return [found for arg in get_args(annotation) for found in _models(arg)]
    return []
