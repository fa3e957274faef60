"""Brings the pinned sglang release into the base. STDLIB ONLY: it runs inside the build.

`python3 overlay.py /opt/opsctl/build/wheels.json` (docker/Dockerfile, before the version guard
and the patch): the record opsctl.image.wheelhouse staged lists the release's pins (sglang and
every `==` pin of its wheel's METADATA) and the sha256 of each staged wheel. Each wheel is
checked against its recorded sha256 first; then each pin is compared with the version the base
holds (importlib.metadata, nothing imported), and those that differ or are absent are installed
with `pip install --no-index --no-deps --find-links <wheels>`: nothing is fetched and nothing
else moves. imagecheck.py proves every pinned version afterwards, in the build and again in a
throwaway container of the finished image.

What it installed (with the base's versions) and what the base already held is written to
overlay.json beside the record. Exits 0 when the base now holds every pin's wheel, 1 on a wheel
that does not match its record or a failed pip (its output is above), 2 on bad input.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

try:  # in the image this file sits beside imagecheck.py (the script's directory is on sys.path)
    from opsctl.image.imagecheck import installed_version, same_version
except ImportError:  # pragma: no cover - inside the image
    from imagecheck import installed_version, same_version  # type: ignore[no-redef]

REPORT = "overlay.json"  # what was installed over the base, and what the base already held


def to_install(pins: dict[str, str]) -> list[tuple[str, str | None, str]]:
    """(distribution, what the base holds or None, pinned version) of each pin that differs."""
    todo = []
    for dist, pinned in sorted(pins.items()):
        have = installed_version(dist)
        if have is None or not same_version(have, pinned):
            todo.append((dist, have, pinned))
    return todo


def bad_wheels(wheel_dir: Path, recorded: dict[str, str]) -> list[str]:
    problems = []
    for name, want in sorted(recorded.items()):
        path = wheel_dir / name
        got = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
        if got != want:
            problems.append(f"wheel {name} is {got}, the host recorded {want}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: overlay.py WHEELS.json", file=sys.stderr)
        return 2
    record_path = Path(argv[0])
    record = json.loads(record_path.read_text())
    wheel_dir = record_path.parent / "wheels"
    problems = bad_wheels(wheel_dir, record["wheels"])
    for problem in problems:
        print(f"opsctl: {problem}", file=sys.stderr)
    if problems:
        return 1
    pins: dict[str, str] = record["pins"]
    todo = to_install(pins)
    for dist, have, pinned in todo:
        print(f"opsctl overlay: {dist} {have or 'absent'} -> {pinned}")
    print(f"opsctl overlay: {len(pins) - len(todo)} of {len(pins)} pins already in the base")
    changed = {dist for dist, _, _ in todo}
    report = {
        "installed": {dist: {"base": have, "pinned": pinned} for dist, have, pinned in todo},
        "held": {dist: pinned for dist, pinned in sorted(pins.items()) if dist not in changed},
    }
    if not todo:
        return _write_report(record_path, report)
    # Environment, not options: an older pip ignores an unknown variable but fails on a flag.
    env = {**os.environ, "PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_ROOT_USER_ACTION": "ignore",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
               "--find-links", str(wheel_dir), *(f"{dist}=={pinned}" for dist, _, pinned in todo)]
    done = subprocess.run(command, env=env, check=False)
    if done.returncode != 0:
        print(f"opsctl: pip install of the release's wheels failed (exit {done.returncode})",
              file=sys.stderr)
        return 1
    return _write_report(record_path, report)


def _write_report(record_path: Path, report: dict[str, Any]) -> int:
    """What the overlay changed, beside its record (/opt/opsctl/build/overlay.json)."""
    (record_path.parent / REPORT).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
