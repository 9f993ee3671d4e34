"""A reasoning model in the engine: its thoughts come out as `reasoning`, apart from the answer;
template variables turn them off; constrained answers render with them off; earlier
reasoning reaches a template that renders it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.sampling_params import SamplingParams
from tests.worker.reasoning_model import ANSWER, REASONING, TEMPLATE, build_reasoning_model
from worker.engine.inference_engine import InferenceEngine
from worker.engine.request import RequestFactory
from worker.engine.sequence import TokenEvent
from worker.errors import RequestError
from worker.text.tokenizer import Tokenizer

pytestmark = pytest.mark.slow
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Path:
    return build_reasoning_model(tmp_path_factory.mktemp("reasoning") / "qwen3", default_model_dir)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Iterator[InferenceEngine]:
    options = {"dtype": "float32", "kv_cache_mb": 16, "speculative_tokens": 0}
    with InferenceEngine(model_dir, **options) as engine:
        yield engine


def events(engine: InferenceEngine, messages: list[dict], **sampling: object) -> list[TokenEvent]:
    received: list[TokenEvent] = []
    done = threading.Event()

    def sink(event: TokenEvent) -> None:
        received.append(event)
        if event.finish_reason is not None:
            done.set()

    params = SamplingParams(**{"temperature": 0, "max_tokens": 16, **sampling})
    engine.submit(messages, params, sink)
    assert done.wait(60), "the request did not finish"
    return received


def parts(received: list[TokenEvent]) -> tuple[str, str]:
    return "".join(e.reasoning for e in received), "".join(e.text for e in received)


def test_the_thoughts_stream_as_reasoning_and_the_answer_as_text(engine: InferenceEngine):
    received = events(engine, HI)
    assert engine.tokenizer.reasoning_tags is not None  # auto: the template writes </think>
    assert parts(received) == (REASONING, ANSWER)
    reasoning_events = [e.reasoning for e in received if e.reasoning]
    assert reasoning_events == ["Let", " me", " think"]  # streamed token by token
    assert received[-1].finish_reason == "stop"


def test_cut_inside_the_reasoning_is_all_reasoning(engine: InferenceEngine):
    received = events(engine, HI, max_tokens=3)
    assert parts(received) == ("Let me", "")
    assert received[-1].finish_reason == "length"


def test_enable_thinking_false_renders_the_empty_reasoning_and_answers_directly(
    engine: InferenceEngine,
):
    off = {"enable_thinking": False}
    received = events(engine, HI, chat_template_kwargs=off)
    assert parts(received) == ("", ANSWER)
    ids = engine.tokenize(HI, SamplingParams(chat_template_kwargs=off))
    prompt = engine.tokenizer.decode(ids, False)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_a_constrained_answer_is_rendered_with_thinking_off(engine: InferenceEngine):
    spec = {"type": "json_schema", "schema": {"type": "boolean"}}
    ids = engine.tokenize(HI, SamplingParams(structured_output=spec))
    assert engine.tokenizer.decode(ids, False).endswith("<think>\n\n</think>\n\n")
    received = events(engine, HI, structured_output=spec)
    reasoning, text = parts(received)
    assert reasoning == "" and text in ("true", "false")


def test_a_constrained_request_may_still_ask_for_thinking(engine: InferenceEngine):
    spec = {"type": "json_schema", "schema": {"type": "boolean"}}
    on = SamplingParams(structured_output=spec, chat_template_kwargs={"enable_thinking": True})
    text = engine.tokenizer.decode(engine.tokenize(HI, on), False)
    assert text.endswith("<|im_start|>assistant\n")


def test_raw_completions_are_not_read_for_reasoning(engine: InferenceEngine):
    raw = engine.generate("<|im_start|>assistant\n", chat=False, temperature=0, max_tokens=6)
    assert raw == f"<think>{REASONING}</think>Hello"


def test_earlier_reasoning_reaches_a_template_that_renders_it(model_dir: Path):
    tokenizer = Tokenizer(model_dir)
    call = {"id": "c1", "name": "f", "arguments": "{}"}
    chat = [
        *HI,
        {"role": "assistant", "content": "", "tool_calls": [call], "reasoning_content": "R1"},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    ]
    text = tokenizer.decode(tokenizer.encode_chat(chat), False)
    assert "<|im_start|>assistant\n<think>\nR1\n</think>\n\n<tool_call>" in text


def test_a_template_without_reasoning_renders_the_same_prompt(default_model_dir: Path):
    tokenizer = Tokenizer(default_model_dir)
    assert tokenizer.reasoning_tags is None
    plain = [*HI, {"role": "assistant", "content": "Yes"}, *HI]
    with_reasoning = [*HI, {"role": "assistant", "content": "Yes", "reasoning_content": "R"}, *HI]
    assert tokenizer.encode_chat(with_reasoning) == tokenizer.encode_chat(plain)


def test_the_parser_can_be_turned_off_or_named(model_dir: Path, default_model_dir: Path):
    assert Tokenizer(model_dir, reasoning_parser="none").reasoning_tags is None
    r1 = Tokenizer(default_model_dir, reasoning_parser="deepseek_r1").reasoning_tags
    assert r1 is not None and r1.implicit_start
    with pytest.raises(ValueError, match="reasoning_parser must be one of"):
        Tokenizer(model_dir, reasoning_parser="granite")


def test_a_prompt_that_opens_the_reasoning_starts_the_answer_inside_it(
    tmp_path: Path, model_dir: Path
):
    # DeepSeek-R1's templates end the generation prompt with "<think>\n", and know no
    # enable_thinking.
    template = TEMPLATE.read_text().replace(
        "{{- '<|im_start|>assistant\\n' }}", "{{- '<|im_start|>assistant\\n<think>\\n' }}"
    )
    template = template.replace("enable_thinking is defined", "false")
    factory = RequestFactory(Tokenizer(with_template(tmp_path, model_dir, template)), 512)
    ids = factory.prompt_token_ids(HI)
    [seq] = factory.build("r", ids, SamplingParams(), lambda event: None)
    parser = seq.output.reasoning_parser
    assert parser is not None and parser.in_reasoning
    # Constrained, the reasoning the template opened is closed empty in the prompt.
    spec = {"type": "json_object"}
    constrained = factory.prompt_token_ids(HI, params=SamplingParams(structured_output=spec))
    assert factory.tokenizer.decode(constrained, False).endswith("<think>\n</think>\n\n")
    [seq] = factory.build("c", constrained, SamplingParams(structured_output=spec), print)
    assert seq.output.reasoning_parser is None


def with_template(tmp_path: Path, model_dir: Path, template: str) -> Path:
    """`model_dir`'s tokenizer with another chat template."""
    folder = tmp_path / "template"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((model_dir / name).read_bytes())
    (folder / "chat_template.jinja").write_text(template)
    return folder


def test_variables_that_break_the_template_are_a_request_error(tmp_path: Path, model_dir: Path):
    template = "{% set n = n if n is defined else 0 %}{{ n + 1 }}{{ messages[0].content }}"
    tokenizer = Tokenizer(with_template(tmp_path, model_dir, template))
    assert tokenizer.decode(tokenizer.encode_chat(HI, template_kwargs={"n": 2}), False) == "3Hi"
    with pytest.raises(RequestError) as caught:
        tokenizer.encode_chat(HI, template_kwargs={"n": "two"})
    assert caught.value.param == "chat_template_kwargs"
    assert str(caught.value).startswith("chat_template_kwargs: the chat template fails with them")


@pytest.mark.parametrize("key", ["add_generation_prompt", "tools", "not-a-name", "raise_exception"])
def test_template_variables_the_server_sets_are_refused(key: str):
    with pytest.raises(RequestError) as caught:
        SamplingParams(chat_template_kwargs={key: True})
    assert caught.value.param == "chat_template_kwargs"
