"""RequestFactory's raw prompts: text and token ids, checked whole, numbered prompt-major."""

from pathlib import Path

import pytest

from common.sampling_params import SamplingParams
from tests.worker.stack_factory import Stack, tiny_stack
from worker.engine.request import GenerationRequest
from worker.errors import ContextLengthExceeded, RequestError


@pytest.fixture
def stack(default_model_dir: Path) -> Stack:
    return tiny_stack(default_model_dir)


def test_text_is_tokenized_without_a_template_and_ids_are_kept(stack: Stack):
    ids = stack.requests.raw_prompt_ids(["Hello there", [5, 6, 7]])
    assert ids == [stack.requests.tokenizer.encode("Hello there"), [5, 6, 7]]


def test_choices_are_numbered_prompt_major_and_match_each_prompt_alone(stack: Stack):
    params = SamplingParams(temperature=0, max_tokens=4, n=2, ignore_eos=True)
    prompts = [[11, 12, 13], [21, 22]]
    seqs = stack.requests.build_prompts("many", prompts, params, stack.collector)
    assert [(s.index, s.prompt_token_ids) for s in seqs] == [
        (0, [11, 12, 13]),
        (1, [11, 12, 13]),
        (2, [21, 22]),
        (3, [21, 22]),
    ]
    stack.scheduler.add(seqs)
    stack.submit([21, 22], "alone", max_tokens=4, ignore_eos=True)
    stack.run()
    alone = stack.collector.token_ids("alone")
    assert stack.collector.token_ids("many", 2) == stack.collector.token_ids("many", 3) == alone


@pytest.mark.parametrize(
    ("prompts", "message"),
    [
        ([], "prompt must not be empty"),
        (["ok", []], "prompt[1] must not be empty"),
        (["ok", [1, 49152]], "prompt[1]: token id 49152 is outside the vocabulary (0..49151)"),
        ([[-3]], "prompt[0]: token id -3 is outside the vocabulary (0..49151)"),
        ([""], "prompt must not be empty"),
    ],
)
def test_bad_prompts_are_request_errors_naming_prompt(stack: Stack, prompts, message: str):
    with pytest.raises(RequestError) as caught:
        stack.requests.raw_prompt_ids(prompts)
    assert (str(caught.value), caught.value.param) == (message, "prompt")


def test_a_raw_prompt_too_long_names_prompt(stack: Stack):
    params = SamplingParams(max_tokens=1)
    with pytest.raises(ContextLengthExceeded) as caught:
        stack.requests.build_prompts("long", [[1] * 300], params, stack.collector)
    assert caught.value.param == "prompt"


def test_stop_token_ids_past_the_vocabulary_are_refused_before_they_index_the_logits(
    stack: Stack,
):
    params = SamplingParams(max_tokens=4, min_tokens=2, stop_token_ids=(10**9,))
    with pytest.raises(RequestError) as caught:
        stack.requests.build("r", [1, 2], params, stack.collector)
    assert caught.value.param == "stop_token_ids"


def test_a_seeded_prompt_samples_alike_alone_and_in_a_batch(stack: Stack):
    params = SamplingParams(temperature=1.0, top_k=0, seed=7, max_tokens=6, ignore_eos=True)
    batch = stack.requests.build_prompts("batch", [[11, 12], [21, 22]], params, stack.collector)
    stack.scheduler.add(batch)
    stack.scheduler.add(stack.requests.build("alone", [21, 22], params, stack.collector))
    stack.run()
    assert stack.collector.token_ids("batch", 1) == stack.collector.token_ids("alone")
    assert len(stack.collector.token_ids("alone")) == 6


def test_max_tokens_past_the_context_is_refused_or_clamped(stack: Stack):
    limit = stack.requests.max_model_len
    prompt = 10
    refused = SamplingParams(max_tokens=limit)
    with pytest.raises(ContextLengthExceeded) as caught:
        stack.requests.check_length(prompt, refused)
    assert caught.value.param == "max_tokens"
    clamped = SamplingParams(max_tokens=limit, clamp_max_tokens=True)
    assert stack.requests.check_length(prompt, clamped) == limit
    within = SamplingParams(max_tokens=5, clamp_max_tokens=True)
    assert stack.requests.check_length(prompt, within) == prompt + 5
    with pytest.raises(ContextLengthExceeded):  # a prompt that fills the context still is
        stack.requests.check_length(limit, clamped)


def test_a_generation_request_holds_the_seeds_keywords_as_one_checked_sampling_params():
    hi = [{"role": "user", "content": "Hi"}]
    request = GenerationRequest(messages=hi, top_k=5, temperature=0.5, max_tokens=4, seed=3)
    assert request.params == SamplingParams(top_k=5, temperature=0.5, max_tokens=4, seed=3)
    assert request.params.model_fields_set == {"top_k", "temperature", "max_tokens", "seed"}
    assert GenerationRequest(hi, params=request.params).params is request.params
    with pytest.raises(RequestError, match="temperature"):
        GenerationRequest(hi, temperature=-1)
    with pytest.raises(TypeError, match="not both"):
        GenerationRequest(hi, params=request.params, top_k=2)
