"""merge_system_turns: every system turn's text, in order, in one leading system message."""

from worker.text.system_turns import has_later_system_turn, merge_system_turns


def test_system_turns_merge_into_the_leading_one_in_order():
    messages = [
        {"role": "system", "content": "A"},
        {"role": "user", "content": "u1"},
        {"role": "system", "content": "B"},
        {"role": "assistant", "content": "a1"},
        {"role": "system", "content": "C"},
    ]
    assert has_later_system_turn(messages)
    assert merge_system_turns(messages) == [
        {"role": "system", "content": "A\n\nB\n\nC"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
    ]


def test_a_chat_without_a_leading_system_turn_gets_one():
    messages = [{"role": "user", "content": "u1"}, {"role": "system", "content": "B"}]
    assert merge_system_turns(messages) == [
        {"role": "system", "content": "B"},
        {"role": "user", "content": "u1"},
    ]


def test_only_a_leading_system_turn_is_not_a_later_one():
    messages = [{"role": "system", "content": "A"}, {"role": "user", "content": "u1"}]
    assert not has_later_system_turn(messages)
    assert merge_system_turns(messages) == messages
