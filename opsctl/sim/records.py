"""The pinned release's own resolution of a variant, as `opsctl profile resolve` recorded it.

`patches/sglang/<release>/resolved/<profile>.<variant>.json` holds what sglang itself resolved for
that variant's argv (its real code, run offline from the wheel, the GLM-5 fixture as the model, the
profile's RTX PRO 6000 Blackwell reported). When the simulator runs exactly such an argv on the
release of a record, and no config.json tells it another model, it reports the record's values; any
other argv falls back to the release's table, defaults.json in the same folder (opsctl.sim.releases;
tested against every record). The release folders sit beside the package: `<repo>/patches/sglang` in
a checkout, `/opt/opsctl/app/patches/sglang` in the image (opsctl.image.plan copies the records
there), inside it as `opsctl/_data/patches/sglang` in an installed wheel
(opsctl.core.paths.RELEASES_DIR; the simulator is an island and cannot import it, so it keeps its
own copy, compared by a unit test). Standard library only.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RELEASES_DIR = "patches/sglang"  # opsctl.core.paths.RELEASES_DIR, relative to the project root
RECORD_DIR = "resolved"  # opsctl.config.resolve.RECORD_DIR, inside a release's folder
_PACKAGE = Path(__file__).resolve().parents[1]
RECORDS_ROOT = next(
    (
        path
        for path in (_PACKAGE.parent / RELEASES_DIR, _PACKAGE / "_data" / RELEASES_DIR)
        if path.is_dir()
    ),
    _PACKAGE.parent / RELEASES_DIR,
)
MAX_RECORD_BYTES = 1 << 20


@functools.lru_cache(maxsize=8)
def _records(root: Path, release: str) -> tuple[tuple[tuple[str, ...], dict[str, Any]], ...]:
    found = []
    for path in sorted((root / release / RECORD_DIR).glob("*.json")):
        try:
            if path.stat().st_size > MAX_RECORD_BYTES:
                continue
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("outcome") == "resolved" and isinstance(
                record.get("argv"), list) and isinstance(record.get("resolved"), dict):
            found.append((tuple(str(a) for a in record["argv"]), record["resolved"]))
    return tuple(found)


def resolved_for(release: str, argv: Sequence[str], root: Path | None = None
                 ) -> dict[str, Any] | None:
    """The release's own resolved settings for exactly this argv, or None."""
    for recorded, resolved in _records(root or RECORDS_ROOT, release):
        if recorded == tuple(argv):
            return resolved
    return None


def lookup(resolved: dict[str, Any], key: tuple[str, ...]) -> tuple[bool, Any]:
    node: Any = resolved
    for part in key:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node
