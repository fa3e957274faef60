"""The fast client's pieces without a server: SSE line splitting under the cap, how a level is
split across client worker processes and merged back, and the client CPU figures."""

from __future__ import annotations

import pytest

from opsctl.core.httpcap import BodyTooLarge, SseLines
from opsctl.traffic.bench.arrival import Arrival
from opsctl.traffic.bench.levels import Phase, PhasePlan, client_workers
from opsctl.traffic.bench.stats import summarize, with_client_cpu
from opsctl.traffic.bench.workers import SEED_STRIDE, _merge, shares, split
from opsctl.traffic.client import RequestResult


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_sse_lines_split_on_every_ending_sse_allows(ending: bytes) -> None:
    lines = SseLines()
    body = b"data: one" + ending + ending + b"data: two" + ending + b": comment" + ending
    # A final lone \r may be half of a \r\n: that line waits for the next read, or the end.
    read = [line for line in lines.feed(body) + lines.end() if line]
    assert read == [b"data: one", b"data: two", b": comment"]


def test_sse_lines_join_a_line_split_across_reads_and_a_crlf_split_in_two() -> None:
    lines = SseLines()
    assert lines.feed(b"data: o") == []
    assert lines.feed(b"ne\r") == []  # the \r may be the first half of \r\n
    assert lines.feed(b"\ndata: two\n") == [b"data: one", b"data: two"]
    assert lines.feed(b"data: [DONE]") == []
    assert lines.end() == [b"data: [DONE]"]


def test_sse_lines_refuse_a_line_over_the_cap_whole_or_in_pieces() -> None:
    with pytest.raises(BodyTooLarge, match="an SSE line exceeds the"):
        SseLines(cap=16).feed(b"data: " + b"x" * 32 + b"\n")
    growing = SseLines(cap=16)
    growing.feed(b"data: " + b"x" * 8)
    with pytest.raises(BodyTooLarge):
        growing.feed(b"x" * 8)
    assert SseLines(cap=16).feed(b"data: 0123456789\n" * 4) == [b"data: 0123456789"] * 4


@pytest.mark.parametrize(("concurrency", "requested", "cores", "workers"), [
    (1, None, 64, 1), (64, None, 64, 1), (65, None, 64, 2), (512, None, 64, 8),
    (512, None, 4, 3), (512, None, 2, 1), (512, None, 1, 1),  # never more than cores - 1
    (4, 8, 2, 4), (4, 2, 64, 2), (1, 3, 64, 1),  # asked for: at most one per stream
])
def test_client_workers_rule(concurrency: int, requested: int | None, cores: int,
                             workers: int) -> None:
    assert client_workers(concurrency, requested, cores) == workers


def test_shares_are_proportional_and_add_up() -> None:
    assert shares(10, [1, 1, 1]) == [4, 3, 3]
    assert shares(7, [3, 1]) == [5, 2]
    assert shares(2, [1, 1, 1]) == [1, 1, 0]
    assert sum(shares(1001, [5, 4, 4])) == 1001


def test_a_counted_phase_splits_into_contiguous_blocks_by_streams() -> None:
    plans = split(PhasePlan(start=100, count=10, concurrency=5), 2)
    assert [(p.concurrency, p.count) for p in plans] == [(3, 6), (2, 4)]
    indexes = [i for p in plans for i in p.indexes()]
    assert indexes == list(range(100, 110))
    few = split(PhasePlan(0, 4, 2), 8)  # never more workers than streams
    assert [(p.start, p.count, p.concurrency) for p in few] == [(0, 2, 1), (2, 2, 1)]


def test_an_open_ended_phase_interleaves_distinct_indexes() -> None:
    plans = split(PhasePlan(start=10, count=None, concurrency=6, arrival=Arrival(duration_s=5)),
                  3)
    firsts = [[next(it) for _ in range(3)] for it in (p.indexes() for p in plans)]
    assert firsts == [[10, 13, 16], [11, 14, 17], [12, 15, 18]]
    assert all(p.arrival.duration_s == 5 for p in plans)
    assert plans[2].after(3) == 21  # past every index it took


def test_poisson_rates_add_up_and_each_worker_draws_its_own_schedule() -> None:
    plans = split(PhasePlan(0, 30, 4, Arrival(rate=8.0, seed=3)), 3)
    assert [p.arrival.rate for p in plans] == [4.0, 2.0, 2.0]
    assert [p.arrival.seed for p in plans] == [3, 3 + SEED_STRIDE, 3 + 2 * SEED_STRIDE]
    assert [p.count for p in plans] == [15, 8, 7]


def _report(started: float, ended: float, cpu: float, results: int, next_index: int) -> Phase:
    report = Phase(started=started, ended=ended, cpu_s=cpu,
                   busiest_share=cpu / (ended - started), next_index=next_index)
    report.batch.results = [RequestResult(ok=True)] * results
    report.batch.sent, report.batch.in_flight = results + 1, 1
    return report


def test_merged_phase_sums_cpu_spans_every_worker_and_keeps_the_busiest() -> None:
    phase = Phase(started=0.0)
    _merge(phase, [_report(10.0, 12.0, 1.0, 3, 50), _report(10.5, 14.0, 3.15, 2, 61)],
           parent_cpu_s=0.2, start=40)
    assert (phase.started, phase.ended, phase.wall()) == (10.0, 14.0, 4.0)
    assert phase.cpu_s == pytest.approx(4.35)
    assert phase.busiest_share == pytest.approx(0.9)  # the second worker: 3.15 s over 3.5 s
    assert (len(phase.batch.results), phase.batch.sent, phase.batch.in_flight) == (5, 7, 2)
    assert phase.next_index == 61


def test_client_cpu_per_token_and_the_client_bound_flag_with_workers() -> None:
    level = summarize(64, [RequestResult(ok=True, output_tokens=1000)] * 4, [], duration_s=2.0)
    quiet = with_client_cpu(level, 0.8, 2.0, busiest_share=0.3, workers=2, cores=8)
    assert (quiet.client_workers, quiet.client_cpu_share) == (2, 0.4)
    assert quiet.client_cpu_us_per_token == 200.0  # 0.8 s over 4000 tokens
    assert not quiet.client_bound
    assert with_client_cpu(level, 1.0, 2.0, busiest_share=0.95, workers=2, cores=8).client_bound
    # Four processes on two cores: none looks busy, all of them together are.
    assert with_client_cpu(level, 3.8, 2.0, busiest_share=0.5, workers=4, cores=2).client_bound
    assert with_client_cpu(summarize(1, [], [], 1.0), 0.1, 1.0).client_cpu_us_per_token is None
