"""How `core.redact.redact` scales with a long run of letters, side by side with the URL-userinfo
pattern it had before stop 31 (scheme unbounded: `[A-Za-z][A-Za-z0-9+.-]*://`).

A server's output can hold a long run of letters (a generated text, a base64 blob); `redact`
runs on every console line, report string and saved log line, so its cost must stay linear.
The old pattern is timed directly with `re.sub` (the rest of `redact` is the same on both
sides); the new one through `redact` itself. A benchmark, recorded here, not a pass/fail test.

`--shapes`: `redact` alone on runs of the pieces its later patterns look at (issue 37:
`name=value`, JSON `"name": "value"`, escaped URLs, userinfo), at doubling lengths: each time
must grow with the length, not its square.

    .venv/bin/python bench/redact_scaling.py            # bench/results/redact_scaling.json
    .venv/bin/python bench/redact_scaling.py --shapes   # bench/results/redact_shapes.json
"""

from __future__ import annotations

import json
import platform
import re
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from opsctl.core.redact import redact

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "redact_scaling.json"
OLD_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"<>]+@")
LENGTHS = (4_000, 8_000, 16_000, 32_000)  # the old pattern's cost grows with the square
NEW_ONLY = (200_000, 1_000_000)
SHAPES_OUT = ROOT / "bench" / "results" / "redact_shapes.json"
SHAPES = ('"key":', '"a": "', "key=", "a=", "?token=", "a://", ":\\/\\/", "http://@")
SHAPE_LENGTHS = (100_000, 200_000, 400_000, 800_000)


def _seconds(work: object, text: str) -> float:
    started = time.perf_counter()
    work(text)  # type: ignore[operator]
    return round(time.perf_counter() - started, 4)


def _record(what: str, out: Path, key: str, runs: list[dict[str, object]]) -> None:
    record = {
        "what": what,
        "command": shlex.join([".venv/bin/python", *sys.argv]),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        key: runs,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    for run in runs:
        print(run)
    print(f"wrote {out.relative_to(ROOT)}")


def shapes() -> None:
    runs: list[dict[str, object]] = [
        {"piece": piece, "chars": length,
         "redact_s": _seconds(redact, piece * (length // len(piece)))}
        for piece in SHAPES for length in SHAPE_LENGTHS]
    _record("redact() on a run of one piece repeated to `chars` characters", SHAPES_OUT,
            "shapes", runs)


def main() -> None:
    if "--shapes" in sys.argv[1:]:
        shapes()
        return
    runs: list[dict[str, object]] = []
    for length in (*LENGTHS, *NEW_ONLY):
        text = "x" * length
        runs.append({
            "letters": length,
            "redact_s": _seconds(redact, text),
            "old_pattern_s": _seconds(lambda t: OLD_USERINFO.sub("", t), text)
            if length in LENGTHS else None,
        })
    _record("redact() on a run of n letters; old_pattern_s: the pre-stop-31 URL-userinfo "
            "pattern alone on the same text (null: not run, quadratic)", OUT, "runs", runs)


if __name__ == "__main__":
    main()
