"""A chat reply's thinking (`reasoning_content`) is kept apart from its answer (`content`): the
answer is what evals score; both are generated tokens for timing."""

from __future__ import annotations

from opsctl.traffic.payload import parse_piece


def test_a_whole_reply_keeps_thinking_and_answer_apart() -> None:
    piece = parse_piece("chat", {"choices": [{"message": {
        "role": "assistant", "reasoning_content": "maybe 7", "content": "#### 9"},
        "finish_reason": "stop"}]}, stream=False)
    assert (piece.text, piece.thinking) == ("#### 9", "maybe 7")


def test_a_thinking_chunk_carries_no_answer() -> None:
    piece = parse_piece("chat", {"choices": [{"delta": {"reasoning_content": "hmm"},
                                              "finish_reason": None}]}, stream=True)
    assert (piece.text, piece.thinking, piece.has_choice) == ("", "hmm", True)


def test_completions_have_no_thinking() -> None:
    piece = parse_piece("completions", {"choices": [{"text": " 42", "finish_reason": "stop"}]},
                        stream=False)
    assert (piece.text, piece.thinking) == (" 42", "")
