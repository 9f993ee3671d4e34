"""The grammar stage: constrained rows masked, the others untouched; real-model JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from common.sampling_params import SamplingParams
from worker.engine.inference_engine import InferenceEngine
from worker.errors import RequestError
from worker.sampling.grammar import CLOSING_BUDGET, GrammarCompiler, GrammarMasks, grammar_finished
from worker.text.tokenizer import Tokenizer
from worker.text.tool_parser import ToolCallParser

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
SCHEMA_SPEC = {"type": "json_schema", "schema": PERSON, "strict": True}


@dataclass
class Row:
    """What GrammarMasks reads from a sequence."""

    grammar: Any
    params: SamplingParams
    max_total_tokens: int = 1000
    token_ids: list[int] = field(default_factory=list)
    output_token_ids: list[int] = field(default_factory=list)
    tool_progress: ToolCallParser | None = None


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    from worker.model.default_model import default_model_path
    from worker.model.model_dir import resolve_model_dir

    return Tokenizer(resolve_model_dir(default_model_path()))


@pytest.fixture(scope="module")
def compiler(tokenizer: Tokenizer) -> GrammarCompiler:
    return GrammarCompiler(tokenizer.backend, tokenizer.vocab_size, tokenizer.eos_token_id)


def masks_for(tokenizer: Tokenizer) -> GrammarMasks:
    return GrammarMasks(
        lambda ids: tokenizer.decode(ids, skip_special_tokens=False), tokenizer.eos_token_ids
    )


def test_only_constrained_rows_are_masked(tokenizer: Tokenizer, compiler: GrammarCompiler):
    logits = torch.randn(3, tokenizer.vocab_size)
    before = logits.clone()
    free = Row(None, SamplingParams())
    constrained = Row(
        compiler.matcher(SamplingParams(structured_output=SCHEMA_SPEC)),
        SamplingParams(structured_output=SCHEMA_SPEC),
    )
    masks_for(tokenizer).apply(logits, [free, constrained, free])
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    allowed = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    assert allowed and all(tokenizer.decode([t]).startswith("{") for t in allowed)


def test_a_json_object_row_near_its_budget_may_only_close(
    tokenizer: Tokenizer, compiler: GrammarCompiler
):
    spec = {"type": "json_object"}
    matcher = compiler.matcher(SamplingParams(structured_output=spec))
    prefix = tokenizer.encode('{"a":["xy', add_special_tokens=False)
    for token in prefix:
        assert not grammar_finished(matcher, token)
    row = Row(matcher, SamplingParams(structured_output=spec), 3 * CLOSING_BUDGET)
    row.token_ids = row.output_token_ids = prefix + [0] * (2 * CLOSING_BUDGET - len(prefix))
    row.output_token_ids = prefix
    logits = torch.zeros(1, tokenizer.vocab_size)
    masks_for(tokenizer).apply(logits, [row])
    allowed = [tokenizer.decode([t]) for t in torch.isfinite(logits[0]).nonzero().flatten()]
    assert allowed and all('"' in text and set(text) <= set('"]}:') for text in allowed)


WEATHER_TOOL = {
    "name": "GetWeather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}


@pytest.mark.parametrize("room", [False, True])
def test_between_tool_calls_without_room_for_another_the_answer_ends(
    tokenizer: Tokenizer, compiler: GrammarCompiler, room: bool
):
    params = SamplingParams(tools=[WEATHER_TOOL], tool_choice="required")
    matcher = compiler.matcher(params)
    call = '<tool_call>{"name":"GetWeather","arguments":{"city":"Tokyo","unit":"C"}}</tool_call>'
    ids = tokenizer.encode(call, add_special_tokens=False)
    for token in ids:
        assert not grammar_finished(matcher, token)
    parser = ToolCallParser()
    parser.feed(call)
    assert parser.between_calls and parser.num_calls == 1
    # Another call would take as many tokens again: with fewer left, only the end remains.
    left = 3 * len(ids) if room else len(ids)
    row = Row(matcher, params, len(ids) + left, list(ids), list(ids), parser)
    logits = torch.zeros(1, tokenizer.vocab_size)
    masks_for(tokenizer).apply(logits, [row])
    allowed = set(torch.isfinite(logits[0]).nonzero().flatten().tolist())
    eos = set(tokenizer.eos_token_ids)
    assert allowed & eos
    assert (allowed <= eos) != room


def test_a_schema_the_engine_cannot_compile_is_a_request_error(compiler: GrammarCompiler):
    with pytest.raises(RequestError) as caught:
        compiler.matcher(
            SamplingParams(
                structured_output={"type": "json_schema", "schema": {"type": "nonsense"}}
            )
        )
    assert caught.value.param == "structured_output"


@pytest.fixture(scope="module")
def engine() -> Iterator[InferenceEngine]:
    with InferenceEngine(kv_cache_mb=256) as eng:
        yield eng


PROMPTS = [
    "Describe a person named Ada who is 36.",
    "Who wrote Hamlet?",
    "Write a poem about the sea.",
    "Tell me about your day.",
]


@pytest.mark.slow
@pytest.mark.parametrize("prompt", PROMPTS)
def test_schema_output_always_parses_and_matches(engine: InferenceEngine, prompt: str):
    texts = engine.generate(
        prompt, temperature=1.0, seed=7, n=3, max_tokens=64, structured_output=SCHEMA_SPEC
    )
    for text in texts:
        value = json.loads(text)
        assert list(value) == ["name", "age"]
        assert isinstance(value["name"], str) and isinstance(value["age"], int)


@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [1, 4, 16, 64])
def test_json_object_output_parses_whatever_the_budget(engine: InferenceEngine, max_tokens: int):
    for prompt in PROMPTS:
        text = engine.generate(
            prompt, temperature=0, max_tokens=max_tokens, structured_output={"type": "json_object"}
        )
        assert isinstance(json.loads(text), dict), text


@pytest.mark.slow
def test_constrained_and_free_requests_share_a_batch(engine: InferenceEngine):
    free = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    expected = engine.generate(PROMPTS[1], temperature=0, max_tokens=24, ignore_eos=True)
    results: dict[str, str] = {}
    import queue

    events: queue.Queue = queue.Queue()
    constrained = SamplingParams(temperature=0, max_tokens=48, structured_output=SCHEMA_SPEC)
    first, _ = engine.submit(PROMPTS[0], constrained, events.put)
    second, _ = engine.submit(PROMPTS[1], free, events.put)
    finished = 0
    while finished < 2:
        event = events.get(timeout=60)
        results[event.request_id] = results.get(event.request_id, "") + event.text
        finished += event.finish_reason is not None
    assert results[second] == expected  # the free row is untouched by its neighbour's mask
    assert json.loads(results[first])["age"] is not None
    stats = engine.stats()
    assert stats.grammar_masked_rows > 0 and stats.grammar_mask_seconds > 0


def test_a_token_the_grammar_refuses_ends_only_its_choice_in_an_error(
    tokenizer: Tokenizer, compiler: GrammarCompiler
):
    from common.token_output import FinishReason
    from worker.engine.output_processor import OutputProcessor
    from worker.engine.sequence import OutputReaders, Sequence
    from worker.text.stop_strings import StopStringMatcher

    params = SamplingParams(structured_output=SCHEMA_SPEC)
    prompt = tokenizer.encode("hi")
    seq = Sequence(
        seq_id=0,
        request_id="r",
        index=0,
        token_ids=list(prompt),
        num_prompt_tokens=len(prompt),
        params=params,
        sink=lambda event: None,
        generator=None,
        output=OutputReaders(tokenizer.detokenizer(prompt, True), StopStringMatcher(())),
        max_total_tokens=100,
        grammar=compiler.matcher(params),
    )
    not_json = tokenizer.encode("Hello", add_special_tokens=False)[0]
    event = OutputProcessor(tokenizer).append_token(seq, not_json)
    assert event.finish_reason is FinishReason.ERROR
    assert "outside the grammar" in (event.error or "")
