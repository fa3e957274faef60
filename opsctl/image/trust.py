"""Which images this host verified: an image is trusted only once its verification passed here.

The engine tags an image when its last layer is committed, before opsctl's post-build
verification runs in a throwaway container, and a label cannot be added to an image after the
build. So the verdict is kept apart: `<state dir>/images/verified.json` maps an image id to the
tag and content hash it was verified as, written atomically and only after the verification
passed. `opsctl build` treats a tagged image without that record (a build interrupted during
verification, an image loaded from elsewhere) as not verified and verifies it again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opsctl.core.files import atomic_write_text
from opsctl.core.paths import default_state_dir

RECORD = Path("images") / "verified.json"
# A record of a few hundred bytes per image: thousands of images fit; a larger file is not
# opsctl's writing and is not read (nor held in memory) at all.
MAX_RECORD_BYTES = 8 << 20


def record_path() -> Path:
    return default_state_dir() / RECORD


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """A JSON object of objects keyed by image id; {} when absent or unreadable."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_RECORD_BYTES + 1)
        data = json.loads(raw) if len(raw) <= MAX_RECORD_BYTES else None
    except (OSError, ValueError, RecursionError):  # RecursionError: nesting too deep to parse
        return {}  # none yet, or unreadable: nothing is trusted, so everything is verified again
    return {key: value for key, value in data.items() if isinstance(value, dict)} \
        if isinstance(data, dict) else {}


def is_verified(image_id: str, content_hash: str) -> bool:
    """Whether `image_id` passed verification on this host as an image of `content_hash`."""
    return bool(image_id) and read_records(record_path()).get(image_id, {}).get("content_hash") \
        == content_hash


def record_verified(image_id: str, tag: str, content_hash: str) -> None:
    """Call only after verification passed."""
    path = record_path()
    records = read_records(path)
    records[image_id] = {"tag": tag, "content_hash": content_hash}
    atomic_write_text(path, json.dumps(dict(sorted(records.items())), indent=2) + "\n")
