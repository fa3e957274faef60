"""Locating the first difference between two runs' greedy outputs."""

from __future__ import annotations

from opsctl.traffic.evals.divergence import GreedyOutput, locate_divergence

REFERENCE = [
    GreedyOutput("count", "one, two, three, four", (11, 12, 13, 14)),
    GreedyOutput("capital", " Paris is the capital of France.", (21, 22, 23, 24, 25)),
    GreedyOutput("code", "    if n < 2:\n        return n", (31, 32, 33)),
]


def test_identical_runs_have_no_divergence() -> None:
    assert locate_divergence(REFERENCE, list(reversed(REFERENCE))) is None  # matched by id


def test_first_differing_request_and_token() -> None:
    current = [REFERENCE[0],
               GreedyOutput("capital", " Paris is the city of lights.", (21, 22, 23, 26, 27)),
               GreedyOutput("code", "different", (9,))]
    found = locate_divergence(REFERENCE, current)
    assert found is not None
    assert (found.request_index, found.request_id, found.unit, found.offset) == (
        1, "capital", "tokens", 3)
    assert "capital of" in found.reference_excerpt and "city of" in found.current_excerpt
    assert found.describe().startswith("request 1 (capital): first difference at 3 tokens")


def test_without_token_ids_the_offset_is_in_characters() -> None:
    reference = [GreedyOutput("a", "x" * 100 + "the same until here, then A")]
    current = [GreedyOutput("a", "x" * 100 + "the same until here, then B")]
    found = locate_divergence(reference, current, excerpt_chars=20)
    assert found is not None and (found.unit, found.offset) == ("characters", 126)
    assert (found.reference_excerpt, found.current_excerpt) == ("...ere, then A", "...ere, then B")
    assert "126 characters" in found.describe()


def test_token_ids_on_one_side_only_fall_back_to_characters() -> None:
    found = locate_divergence([GreedyOutput("a", "abc", (1, 2))], [GreedyOutput("a", "abd")])
    assert found is not None and (found.unit, found.offset) == ("characters", 2)


def test_a_prefix_diverges_where_the_shorter_output_ends() -> None:
    found = locate_divergence([GreedyOutput("a", "one two three", (1, 2, 3))],
                              [GreedyOutput("a", "one two", (1, 2))])
    assert found is not None and (found.unit, found.offset) == ("tokens", 2)
    assert found.current_excerpt == "one two"


def test_missing_and_failed_outputs() -> None:
    gone = locate_divergence(REFERENCE, REFERENCE[:1])
    assert gone is not None and (gone.request_index, gone.unit) == (1, "missing")
    assert gone.describe() == "request 1 (capital): not in the current run"
    failed_now = locate_divergence([GreedyOutput("a", "text")], [GreedyOutput("a", None)])
    assert failed_now is not None and failed_now.note == "no output in the current run"
    failed_before = locate_divergence([GreedyOutput("a", None)], [GreedyOutput("a", "text")])
    assert failed_before is not None and failed_before.note == "no output in the reference"
    both_failed = [GreedyOutput("a", None), GreedyOutput("b", "x")]
    later = locate_divergence(both_failed, [GreedyOutput("a", None), GreedyOutput("b", "y")])
    assert later is not None and later.request_index == 1  # a failure on both sides is skipped
