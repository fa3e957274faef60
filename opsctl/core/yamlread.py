"""Reading YAML that a user or a peer wrote (`--affinity`, the receivers file) so that no
document can crash or stall the reader.

`yaml.safe_load` builds only plain types, but three documents still end in a traceback or an
unbounded walk: an alias inside the node it names (`&a [*a]`: a list that holds itself, which
any walk over it recurses into until RecursionError), aliases nested to a "billion laughs"
(shared in memory, but 10^9 nodes to every walk), and an integer longer than Python converts
(ValueError from int(), its 4300-digit limit). `load_yaml` refuses each as a `YamlRefused`, a
`yaml.YAMLError`, so a caller's one `except yaml.YAMLError` covers them with its own wording.
Its messages name the fault and the line, never the text there (a line may hold a secret).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_NODES = 1_000_000  # nodes as aliases expand: far above any affinity or receivers file


class YamlRefused(yaml.YAMLError):
    """A document load_yaml refuses although it parses (see the module's docstring)."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses an alias to a node still being composed (a recursive one)."""

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._open: list[str] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise YamlRefused(f"alias *{event.anchor} on line {line} lies inside the node "
                                  "it names (a recursive structure)")
            return super().compose_node(parent, index)
        anchor = getattr(event, "anchor", None)
        if anchor:
            self._open.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            if anchor:
                self._open.pop()


def load_yaml(data: str | bytes) -> Any:
    """The document's plain value, as `yaml.safe_load` gives it; YamlRefused (a YAMLError) for
    a recursive alias, more than MAX_NODES nodes once aliases expand, nesting deeper than the
    reader recurses, or a value that cannot be built (an integer past int()'s digit limit)."""
    loader = _Loader(data)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded(node, {}) > MAX_NODES:
            raise YamlRefused(f"more than {MAX_NODES} nodes once its aliases expand")
        return loader.construct_document(node)
    except RecursionError:
        raise YamlRefused("nested too deeply to read") from None
    except ValueError as exc:  # int()'s digit limit, a date out of range
        raise YamlRefused(f"a value cannot be read ({str(exc).split(';')[0]})") from None
    finally:
        loader.dispose()


def _expanded(node: Node, sizes: dict[int, int]) -> int:
    """Nodes under `node` with every alias expanded, each shared node counted once per use
    (memoised: linear in the document, whatever the expansion)."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, SequenceNode):
        size += sum(_expanded(child, sizes) for child in node.value)
    elif isinstance(node, MappingNode):
        size += sum(_expanded(key, sizes) + _expanded(value, sizes) for key, value in node.value)
    sizes[id(node)] = size
    return size
