"""Writing files so that a reader never sees half of one: write beside, then rename into place."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` atomically (same-directory temp file + os.replace); return `path`.

    The temp file is removed if anything fails, so no `.tmp` is left behind.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
