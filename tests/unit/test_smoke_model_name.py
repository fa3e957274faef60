"""Choosing the served model name from /v1/models: never guessed, always explained."""

from __future__ import annotations

import pytest

from opsctl.core.redact import mask_secret, redact
from opsctl.traffic.served import choose_served_name


def test_single_listed_model_is_used_even_when_it_differs_from_the_alias() -> None:
    name, source, notes = choose_served_name(["/models/GLM-5-NVFP4"], None, "glm-5")
    assert name == "/models/GLM-5-NVFP4"
    assert "only model listed" in source
    assert notes and "glm-5" in notes[0]


def test_profile_alias_wins_among_several_listed() -> None:
    name, source, _ = choose_served_name(["glm-5", "glm-5-lora"], None, "glm-5")
    assert (name, source) == ("glm-5", "profile served_name, listed by /v1/models")


def test_several_listed_without_the_alias_fails_naming_them() -> None:
    with pytest.raises(ValueError, match="'a', 'b'"):
        choose_served_name(["a", "b"], None, "glm-5")
    with pytest.raises(ValueError, match="2 models"):
        choose_served_name(["a", "b"], None, None)


def test_requested_model_must_be_listed() -> None:
    assert choose_served_name(["a", "b"], "b", None)[0] == "b"
    with pytest.raises(ValueError, match="not served"):
        choose_served_name(["a"], "glm-5", None)


def test_nothing_listed_fails() -> None:
    with pytest.raises(ValueError, match="no model"):
        choose_served_name([], None, "glm-5")


def test_mask_keeps_only_the_last_four_of_a_long_key() -> None:
    assert mask_secret("sk-0123456789abcdef") == "****cdef"
    assert mask_secret("short") == "****"
    assert mask_secret(None) is None
    assert redact("Bearer sk-0123456789abcdef", "sk-0123456789abcdef") == "Bearer ****cdef"
