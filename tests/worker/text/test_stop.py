"""StopStringMatcher: exact emitted text and matches when stops arrive split across pieces."""

import pytest

from worker.text.stop_strings import StopResult, StopStringMatcher


def feed_all(matcher: StopStringMatcher, pieces: list[str]) -> tuple[str, str | None]:
    emitted = ""
    for piece in pieces:
        result = matcher.feed(piece)
        emitted += result.text
        if result.matched is not None:
            return emitted, result.matched
    return emitted + matcher.flush(), None


def test_no_stops_passes_text_through():
    assert StopStringMatcher([]).feed("abc") == StopResult("abc", None)


def test_stop_inside_one_piece_cuts_before_it():
    assert StopStringMatcher(["END"]).feed("helloENDworld") == StopResult("hello", "END")


def test_stop_split_across_pieces_is_found_and_never_emitted():
    matcher = StopStringMatcher(["</s>"])
    assert matcher.feed("abc<") == StopResult("abc", None)
    assert matcher.feed("/") == StopResult("", None)
    assert matcher.feed("s>tail") == StopResult("", "</s>")


def test_false_start_is_released_once_it_cannot_be_a_stop():
    matcher = StopStringMatcher(["STOP"])
    assert matcher.feed("ST") == StopResult("", None)
    assert matcher.feed("AR") == StopResult("STAR", None)


def test_earliest_of_several_stops_wins():
    assert feed_all(StopStringMatcher(["world", "lo"]), ["hel", "lo world"]) == ("hel", "lo")


def test_flush_releases_held_text_when_generation_ends_otherwise():
    matcher = StopStringMatcher(["\n\n"])
    assert matcher.feed("line\n") == StopResult("line", None)
    assert matcher.flush() == "\n"
    assert matcher.flush() == ""


def test_character_by_character_equals_whole():
    text = "The answer is 42.### done"
    emitted, matched = feed_all(StopStringMatcher(["###"]), list(text))
    assert (emitted, matched) == ("The answer is 42.", "###")


def test_empty_stop_string_is_rejected():
    with pytest.raises(ValueError, match="non-empty"):
        StopStringMatcher(["ok", ""])
