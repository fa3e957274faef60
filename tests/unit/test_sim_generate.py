"""Deterministic generation plans (pure, no server)."""

from __future__ import annotations

from opsctl.sim.generate import (
    EOS_TOKEN_ID,
    Plan,
    count_chat_prompt_tokens,
    count_text_tokens,
    natural_length,
    prompt_key,
)


def test_same_prompt_same_tokens_different_prompt_different_tokens() -> None:
    one = Plan.make(prompt_key("hello"), 40, ignore_eos=True)
    again = Plan.make(prompt_key("hello"), 40, ignore_eos=True)
    other = Plan.make(prompt_key("hullo"), 40, ignore_eos=True)
    assert one.text() == again.text()
    assert one.text() != other.text()


def test_salt_changes_the_output() -> None:
    clean = Plan.make(prompt_key("hello"), 40, ignore_eos=True)
    salted = Plan.make(prompt_key("hello", b"|corrupt"), 40, ignore_eos=True)
    assert clean.text() != salted.text()


def test_longer_max_tokens_extends_a_shorter_output() -> None:
    short = Plan.make(prompt_key("p"), 5, ignore_eos=True)
    long = Plan.make(prompt_key("p"), 20, ignore_eos=True)
    assert long.text().startswith(short.text())
    assert [short.token(i) for i in range(5)] == [long.token(i) for i in range(5)]


def test_length_finish_below_natural_length() -> None:
    key = prompt_key("q")
    plan = Plan.make(key, natural_length(key) - 1, ignore_eos=False)
    assert plan.finish_reason() == {"type": "length", "length": plan.total}
    assert all(plan.token(i)[0] != EOS_TOKEN_ID for i in range(plan.total))


def test_stop_finish_ends_with_eos_that_counts_but_has_no_text() -> None:
    key = prompt_key("q")
    plan = Plan.make(key, 5000, ignore_eos=False)
    assert plan.total == natural_length(key)
    assert plan.finish_reason() == {"type": "stop", "matched": EOS_TOKEN_ID}
    assert plan.token(plan.total - 1) == (EOS_TOKEN_ID, "")
    assert len(plan.text().split()) == plan.total - 1


def test_ignore_eos_runs_to_max_tokens() -> None:
    plan = Plan.make(prompt_key("q"), 5000, ignore_eos=True)
    assert (plan.total, plan.stops) == (5000, False)


def test_prompt_token_counts() -> None:
    assert count_text_tokens("Hello, world!") == 4
    messages = [{"role": "user", "content": "Hello, world!"},
                {"role": "user", "content": [{"type": "text", "text": "two words"}]}]
    assert count_chat_prompt_tokens(messages) == 4 + 2 + 4 * 2 + 2
