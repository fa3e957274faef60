"""The exporter skips report files it cannot use and never fails a scrape or its start-up."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from opsctl.observe.exporter import ReportFileCollector, exporter_registry, start

GOOD_SMOKE = {"kind": "smoke", "started_at": "2026-11-29T12:00:00+00:00", "duration_s": 4.5,
              "profile": "sim", "variant": "gathercast", "passed": True, "checks": [], "slo": {}}

# Newer than the good report, each unusable in its own way.
BAD_SMOKE: dict[str, bytes | None] = {
    "not-json": b"{ half a report",
    "a-list": b"[1, 2, 3]",
    "a-string": b'"smoke"',
    "wrong-shape": json.dumps({"kind": "smoke", "passed": True}).encode(),  # no duration_s
    "wrong-types": json.dumps({**GOOD_SMOKE, "checks": [1, 2]}).encode(),
    "not-utf8": b"\xff\xfe{}",
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "a-directory": None,
}
BAD_BENCH: dict[str, bytes] = {
    "variants-not-a-list": json.dumps({"kind": "bench", "started_at": "x", "duration_s": 1,
                                       "variants": 7}).encode(),
    "no-kind": json.dumps({"variants": []}).encode(),
    "levels-wrong": json.dumps({"kind": "bench", "duration_s": 1, "variants": [
        {"variant": "a", "levels": [{"concurrency": 1}]}]}).encode(),
}


def _write_bad(folder: Path) -> None:
    for index, (name, content) in enumerate(BAD_SMOKE.items()):
        path = folder / f"smoke-{index}-{name}.json"
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)
        os.utime(path, (1000 + index, 1000 + index))
    for name, content in BAD_BENCH.items():
        (folder / f"bench-{name}").mkdir()
        (folder / f"bench-{name}" / "bench.json").write_bytes(content)


def test_bad_files_are_skipped_and_the_newest_good_one_counts(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = tmp_path / "smoke-good.json"
    good.write_text(json.dumps(GOOD_SMOKE))
    os.utime(good, (10, 10))
    _write_bad(tmp_path)
    with caplog.at_level(logging.WARNING):
        registry = exporter_registry(lambda: [], tmp_path)  # start-up collects once
        first = generate_latest(registry)
        second = generate_latest(registry)
    labels = {"profile": "sim", "variant": "gathercast"}
    assert registry.get_sample_value("opsctl_smoke_success", labels) == 1.0
    assert registry.get_sample_value("opsctl_exporter_report_files_skipped",
                                     {"kind": "smoke"}) == len(BAD_SMOKE)
    assert registry.get_sample_value("opsctl_exporter_report_files_skipped",
                                     {"kind": "bench"}) == len(BAD_BENCH)
    assert first == second
    skipped = [r for r in caplog.records if "skipped report file" in r.getMessage()]
    assert len(skipped) == len(BAD_SMOKE) + len(BAD_BENCH)  # once per file, not per scrape


def test_a_bad_file_appearing_later_never_fails_a_scrape(tmp_path: Path) -> None:
    server, thread = start(exporter_registry(lambda: [], tmp_path), "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        assert httpx.get(url, timeout=5).status_code == 200
        _write_bad(tmp_path)
        answer = httpx.get(url, timeout=5)
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert answer.status_code == 200
    assert 'opsctl_exporter_report_files_skipped{kind="smoke"} 8.0' in answer.text


def test_only_bad_files_give_no_report_metrics(tmp_path: Path) -> None:
    _write_bad(tmp_path)
    names = {family.name for family in ReportFileCollector(tmp_path).collect()}
    assert names == {"opsctl_exporter_report_files_skipped"}
