"""The complexity gate: every function in opsctl/ at most LIMIT by radon's cyclomatic count.

Radon counts what ruff's mccabe (C901) does not: each boolean operator (`a and b or c`), each
conditional expression (`x if c else y`) and each comprehension's `if`, so packing branches into
one expression does not hide them. Functions, methods and nested functions are each measured;
no function is exempt. Exit 0 when all are within LIMIT, 1 listing every one above it.

    .venv/bin/python scripts/complexity.py [--limit N] [PATH ...]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

LIMIT = 15


def _functions(blocks: Iterable[Function | Class]) -> Iterator[Function]:
    """Every function block: top-level, methods (of nested classes too) and closures."""
    for block in blocks:
        if isinstance(block, Class):
            yield from _functions(block.methods)
            yield from _functions(block.inner_classes)
        else:
            yield block
            yield from _functions(block.closures)


def _top_level(code: str) -> list[Function | Class]:
    """The module's own functions and classes (cc_visit also lists methods beside their class)."""
    return [block for block in cc_visit(code) if not getattr(block, "is_method", False)]


def over_limit(root: Path, limit: int) -> list[str]:
    """'path:line name (complexity)' for each function under root above limit."""
    found: list[tuple[int, str]] = []
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    for path in files:
        for fn in _functions(_top_level(path.read_text())):
            if fn.complexity > limit:
                found.append((fn.complexity, f"{path}:{fn.lineno} {fn.fullname} ({fn.complexity})"))
    return [line for _, line in sorted(found, key=lambda item: -item[0])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("opsctl")])
    parser.add_argument("--limit", type=int, default=LIMIT)
    args = parser.parse_args(argv)
    offenders = [line for root in args.paths for line in over_limit(root, args.limit)]
    for line in offenders:
        print(line)
    if offenders:
        print(f"complexity: {len(offenders)} function(s) above {args.limit} (radon cc)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
