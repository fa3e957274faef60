"""bench's per-request records: the caps, what a capped level says, re-scoring, sglang's peaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsctl.config.sloconfig import Slo
from opsctl.core.errors import UsageError
from opsctl.traffic.bench import records as bench_requests
from opsctl.traffic.bench.records import peaks, read_records, record_level, rescore
from opsctl.traffic.client import RequestResult


def _ok(started: float, gaps: int = 4, itl: float = 0.01) -> RequestResult:
    return RequestResult(ok=True, ttft_s=0.1, e2e_s=0.1 + gaps * itl, output_tokens=gaps + 1,
                         itl_s=[itl] * gaps, finish_reason="length", started=started)


def test_the_caps_bound_a_level_and_say_what_they_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_requests, "MAX_RECORDS_PER_LEVEL", 3)
    monkeypatch.setattr(bench_requests, "MAX_GAPS_PER_LEVEL", 9)
    kept = record_level([_ok(float(i)) for i in range(5)], 0.0, None)
    assert len(kept.records) == 3 and kept.dropped_records == 2
    assert [r["gaps_s"] is None for r in kept.records] == [False, False, True]
    assert kept.records[2]["tpot_s"] is not None  # past the gap cap: TPOT still kept
    assert kept.note() == ("truncated: 2 request(s) past the first 3 not recorded; 1 request(s) "
                           "recorded without gaps past 9 gaps")


def test_errors_are_recorded_redacted_and_failures_are_not_good(tmp_path: Path) -> None:
    failed = RequestResult(ok=False, error_kind="http_status", error="HTTP 401: key sk-secret",
                           started=1.0)
    kept = record_level([_ok(0.5), failed], 0.5, "sk-secret")
    assert kept.records[0]["start_s"] == 0.0 and kept.records[1]["start_s"] == 0.5
    assert "sk-secret" not in str(kept.records[1]["error"])
    path = tmp_path / "c1.jsonl"
    path.write_bytes(bench_requests.encode(kept.records))
    records = read_records(path)
    slo = Slo.model_validate({"tpot": {"quantile": 0.5, "threshold_ms": 50}})
    good = rescore(records, slo, 2.0)
    assert (good.good, good.share, good.rate_per_s) == (1, 0.5, 0.5)
    tight = Slo.model_validate({"tpot": {"quantile": 0.5, "threshold_ms": 5}})
    assert rescore(records, tight, 2.0).good == 0


def test_a_file_that_is_no_requests_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c1.jsonl"
    path.write_text('{"ok": true}\nnot json\n')
    with pytest.raises(UsageError, match=r"c1.jsonl:2: not a request record"):
        read_records(path)
    with pytest.raises(UsageError, match="No such file"):
        read_records(tmp_path / "missing.jsonl")


def test_peaks_are_sglangs_one_second_buckets() -> None:
    # Two requests in the first second (5 tokens each), one in the third second.
    tokens, running = peaks([_ok(0.0), _ok(0.2), _ok(2.1), RequestResult(ok=False)])
    assert (tokens, running) == (10.0, 2)
    assert peaks([RequestResult(ok=False)]) == (None, None)
