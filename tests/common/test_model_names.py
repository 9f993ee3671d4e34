"""Served model names: which is the model's own, which are aliases, what a pattern matches."""

import pytest

from common.model_names import check_served_name, name_matches, split_served_names


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ((), ("Default", ())),
        (("mine",), ("mine", ())),
        (("claude-*",), ("Default", ("claude-*",))),
        (("claude-*", "mine", "gpt-4o", "mine"), ("mine", ("claude-*", "gpt-4o"))),
        (("Default", "claude-*"), ("Default", ("claude-*",))),
    ],
)
def test_the_first_plain_name_names_the_model(names, expected):
    assert split_served_names(names, "Default") == expected


@pytest.mark.parametrize(
    ("served", "requested", "matches"),
    [
        ("claude-*", "claude-opus-5-5", True),
        ("claude-*", "claude-", True),
        ("claude-*", "Claude-opus", False),
        ("claude-*", "claude", False),
        ("*", "anything", True),
        ("gpt-4o", "gpt-4o", True),
        ("gpt-4o", "gpt-4o-mini", False),
    ],
)
def test_a_pattern_matches_its_prefix_and_a_name_itself(served, requested, matches):
    assert name_matches(served, requested) is matches


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "served_model_name must not be empty, got ''"),
        (" ", "served_model_name must not be empty, got ' '"),
        ("cl*ude", "served_model_name may hold * only at its end, got 'cl*ude'"),
        ("**", "served_model_name may hold * only at its end, got '**'"),
    ],
)
def test_bad_names_are_refused_naming_them(name, message):
    with pytest.raises(ValueError) as caught:
        check_served_name(name)
    assert str(caught.value) == message
