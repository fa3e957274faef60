"""Where opsctl finds its project files (deploy/, docker/, patches/,
sglang-args/, monitoring/).

opsctl runs from a checkout (installed editable); OPSCTL_PROJECT_DIR points elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_DIR_ENV = "OPSCTL_PROJECT_DIR"


def project_root() -> Path:
    override = os.environ.get(PROJECT_DIR_ENV)
    if override:
        return Path(override).resolve()
    return Path(__file__).resolve().parents[2]
