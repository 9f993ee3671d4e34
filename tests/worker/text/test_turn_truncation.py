"""truncation "auto": the fewest oldest turns dropped, system turns kept, a user turn first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.sampling_params import SamplingParams
from tests.worker.stack_factory import tiny_stack
from worker.text.turn_truncation import fit_turns


def turn(role: str, size: int) -> dict[str, Any]:
    return {"role": role, "content": "x" * size}


def render(turns: Sequence[Mapping[str, Any]]) -> list[int]:
    """One id per character of content: the length is exact and additive."""
    return [0] * sum(len(t["content"]) for t in turns)


def kept(turns: list[dict[str, Any]], budget: int) -> int:
    return len(fit_turns(turns, render, lambda ids: len(ids) <= budget))


CHAT = [
    turn("system", 5),
    turn("user", 10),
    turn("assistant", 20),
    turn("user", 10),
    turn("assistant", 20),
    turn("tool", 30),
    turn("user", 10),
]


def test_a_chat_that_fits_is_left_whole():
    assert kept(CHAT, 105) == 105


def test_the_oldest_turns_go_first_and_the_rest_starts_at_a_user_turn():
    assert kept(CHAT, 104) == 5 + 10 + 20 + 30 + 10  # the first user and assistant went
    assert kept(CHAT, 74) == 5 + 10  # the tool result never leads: back to the last user turn
    assert kept(CHAT, 15) == 15


def test_when_nothing_fits_the_shortest_is_rendered_for_the_length_check_to_refuse():
    assert kept(CHAT, 3) == 15
    assert kept([turn("user", 50)], 3) == 50  # one turn: nothing to drop


def test_a_request_drops_its_oldest_turns_only_when_asked(default_model_dir):
    requests = tiny_stack(default_model_dir).requests  # a 256-token context
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first " * 300},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "What now?"},
    ]
    params = SamplingParams(max_tokens=16, drop_oldest_turns=True)
    ids = requests.prompt_token_ids(chat, params=params)
    assert len(ids) + 16 <= requests.max_model_len
    assert ids == requests.prompt_token_ids([chat[0], chat[3]])
    whole = requests.prompt_token_ids(chat, params=SamplingParams(max_tokens=16))
    assert len(whole) + 16 > requests.max_model_len  # without it, all of it (a 400 later)
