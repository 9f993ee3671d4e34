"""Tokenizer: chat template, and incremental detokenization that never splits a character."""

from pathlib import Path

import pytest

from worker.errors import RequestError
from worker.text.tokenizer import REPLACEMENT_CHAR, Tokenizer

TEXT = "Grüße, 世界! Emoji: 🎉🚀 and done."


@pytest.fixture(scope="module")
def tokenizer(default_model_dir: Path) -> Tokenizer:
    return Tokenizer(default_model_dir)


def stream(tokenizer: Tokenizer, prompt: list[int], ids: list[int]) -> list[str]:
    detok = tokenizer.detokenizer(prompt)
    deltas = [detok.step(token) for token in ids]
    return [*deltas, detok.flush()]


def test_chat_template_adds_default_system_prompt_and_assistant_turn(tokenizer: Tokenizer):
    ids = tokenizer.encode_chat([{"role": "user", "content": "Hi"}])
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_eos_is_im_end(tokenizer: Tokenizer):
    assert tokenizer.eos_token_ids == frozenset({2})


def test_deltas_concatenate_to_the_full_decode(tokenizer: Tokenizer):
    prompt = tokenizer.encode_chat([{"role": "user", "content": "Say it"}])
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    deltas = stream(tokenizer, prompt, ids)
    assert "".join(deltas) == TEXT


def test_no_delta_holds_half_a_character(tokenizer: Tokenizer):
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    deltas = stream(tokenizer, [], ids)
    assert all(REPLACEMENT_CHAR not in delta for delta in deltas)
    # The emoji spans several byte-level tokens: some steps must have held text back.
    assert len(ids) > len([d for d in deltas if d])


def test_flush_releases_an_incomplete_character(tokenizer: Tokenizer):
    ids = tokenizer.encode("🎉", add_special_tokens=False)
    assert len(ids) > 1
    detok = tokenizer.detokenizer([])
    assert [detok.step(t) for t in ids[:-1]] == [""] * (len(ids) - 1)
    assert detok.flush() == REPLACEMENT_CHAR


def test_special_tokens_are_skipped(tokenizer: Tokenizer):
    detok = tokenizer.detokenizer([])
    assert detok.step(2) == ""  # <|im_end|>
    assert detok.step(tokenizer.encode("ok", add_special_tokens=False)[0]) == "ok"


def test_explicit_system_message_replaces_the_default(tokenizer: Tokenizer):
    with_system = tokenizer.encode_chat(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    )
    text = tokenizer.decode(with_system, skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert "SmolLM" not in text


def test_a_final_assistant_message_can_be_continued(tokenizer: Tokenizer):
    chat = [{"role": "user", "content": "JSON please"}, {"role": "assistant", "content": '{"a": '}]
    text = tokenizer.decode(tokenizer.encode_chat(chat, continue_final=True), False)
    assert text.endswith('<|im_start|>assistant\n{"a": ')
    answered = tokenizer.decode(tokenizer.encode_chat(chat), False)
    assert answered.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_continuing_needs_a_final_assistant_message(tokenizer: Tokenizer):
    with pytest.raises(RequestError, match="non-empty assistant message"):
        tokenizer.encode_chat([{"role": "user", "content": "hi"}], continue_final=True)


SYSTEM_MID_CHAT = [
    {"role": "system", "content": "S1"},
    {"role": "user", "content": "Hi"},
    {"role": "system", "content": "S2"},
]


def test_a_system_turn_is_rendered_where_it_stands(tokenizer: Tokenizer):
    text = tokenizer.decode(tokenizer.encode_chat(SYSTEM_MID_CHAT), skip_special_tokens=False)
    assert text == (
        "<|im_start|>system\nS1<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>system\nS2<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_template_that_refuses_later_system_turns_gets_them_merged(default_model_dir: Path):
    strict = (
        "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
        "{{ raise_exception('System role only first') }}{% endif %}"
        "[{{ m.role }}]{{ m.content }}{% endfor %}"
    )
    tokenizer = Tokenizer(default_model_dir, chat_template=strict)
    ids = tokenizer.encode_chat(SYSTEM_MID_CHAT)
    assert tokenizer.decode(ids, skip_special_tokens=False) == "[system]S1\n\nS2[user]Hi"
