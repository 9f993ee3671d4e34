"""/v1/completions end to end: the official SDK's `completions.create` against `astrai serve`
on the default model; greedy outputs must agree across every way of asking."""

from __future__ import annotations

import httpx
import openai
import pytest
import torch

from bench.accuracy import sequence_logits
from tests.e2e.harness import Server
from tests.e2e.sdk import MODEL, openai_client
from tests.worker.gguf_oracle import transformers_from_gguf
from worker.model.loader import load_model
from worker.model.model_dir import gguf_source, resolve_model_dir

pytestmark = pytest.mark.slow
PROMPT = "The capital of France is"
OTHER = "Water boils at"
GREEDY = {"temperature": 0, "max_tokens": 8, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def client(default_server: Server) -> openai.OpenAI:
    return openai_client(default_server)


def token_ids(server: Server, text: str) -> list[int]:
    return httpx.post(f"{server.url}/tokenize", json={"prompt": text}).json()["tokens"]


def greedy_text(client: openai.OpenAI, prompt: str | list[int]) -> str:
    return client.completions.create(model=MODEL, prompt=prompt, **GREEDY).choices[0].text


def test_shape_usage_and_the_default_max_tokens(client: openai.OpenAI, default_server: Server):
    reply = client.completions.create(
        model=MODEL, prompt=PROMPT, temperature=0, extra_body={"ignore_eos": True}
    )
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-")
    assert reply.model == MODEL
    [choice] = reply.choices
    assert (choice.index, choice.finish_reason, choice.logprobs) == (0, "length", None)
    assert choice.text
    assert reply.usage.prompt_tokens == len(token_ids(default_server, PROMPT))
    assert reply.usage.completion_tokens == 16  # OpenAI's default max_tokens
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 16


def test_echo_prepends_the_prompt(client: openai.OpenAI, default_server: Server):
    plain = greedy_text(client, PROMPT)
    echoed = client.completions.create(model=MODEL, prompt=PROMPT, echo=True, **GREEDY)
    assert echoed.choices[0].text == PROMPT + plain
    by_ids = client.completions.create(
        model=MODEL, prompt=token_ids(default_server, PROMPT), echo=True, **GREEDY
    )
    assert by_ids.choices[0].text == PROMPT + plain  # ids echo as the text they spell
    assert echoed.usage.completion_tokens == 8  # the echo is no generated token


def test_token_ids_give_the_same_text_as_the_string(client: openai.OpenAI, default_server: Server):
    assert greedy_text(client, token_ids(default_server, PROMPT)) == greedy_text(client, PROMPT)


def test_stream_equals_the_whole_response(client: openai.OpenAI):
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt=PROMPT,
            stream=True,
            stream_options={"include_usage": True},
            **GREEDY,
        )
    )
    assert all(c.object == "text_completion" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    streamed = "".join(c.choices[0].text for c in chunks if c.choices)
    assert streamed == greedy_text(client, PROMPT)


def test_prompts_times_n_choices_in_prompt_major_order(
    client: openai.OpenAI, default_server: Server
):
    reply = client.completions.create(model=MODEL, prompt=[PROMPT, OTHER], n=2, **GREEDY)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    texts = [c.text for c in reply.choices]
    assert texts[0] == texts[1] == greedy_text(client, PROMPT)
    assert texts[2] == texts[3] == greedy_text(client, OTHER)
    num_prompt = len(token_ids(default_server, PROMPT)) + len(token_ids(default_server, OTHER))
    assert reply.usage.prompt_tokens == num_prompt
    assert reply.usage.completion_tokens == 4 * 8


def test_cached_prompt_tokens_count_every_prompt_once(client: openai.OpenAI):
    prompts = [f"{PROMPT} " * 8 + "Paris.", f"{OTHER} " * 8 + "a hundred degrees."]

    def cached(prompt: str | list[str], n: int = 1) -> int:
        reply = client.completions.create(model=MODEL, prompt=prompt, n=n, **GREEDY)
        return reply.usage.prompt_tokens_details.cached_tokens

    for prompt in prompts:
        cached(prompt)  # now its full pages are in the prefix cache
    alone = [cached(p) for p in prompts]
    assert all(alone)
    assert cached(prompts, n=2) == sum(alone)


def test_streamed_prompts_and_token_id_batches(client: openai.OpenAI, default_server: Server):
    ids = [token_ids(default_server, PROMPT), token_ids(default_server, OTHER)]
    texts = ["", ""]
    for chunk in client.completions.create(model=MODEL, prompt=ids, stream=True, **GREEDY):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
    assert texts == [greedy_text(client, PROMPT), greedy_text(client, OTHER)]


def test_logprobs_in_openais_legacy_shape(client: openai.OpenAI):
    reply = client.completions.create(model=MODEL, prompt=PROMPT, logprobs=2, **GREEDY)
    [choice] = reply.choices
    logprobs = choice.logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == 8
    assert "".join(logprobs.tokens) == choice.text
    offsets = [sum(len(t) for t in logprobs.tokens[:i]) for i in range(8)]
    assert logprobs.text_offset == offsets
    for token, logprob, top in zip(
        logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs, strict=True
    ):
        assert 1 <= len(top) <= 2 and logprob <= 0
        assert top[token] == pytest.approx(logprob) == pytest.approx(max(top.values()))  # greedy


def test_streamed_logprobs_offsets_run_on(client: openai.OpenAI):
    chunks = list(
        client.completions.create(model=MODEL, prompt=PROMPT, logprobs=1, stream=True, **GREEDY)
    )
    tokens, offsets = [], []
    for chunk in chunks:
        if chunk.choices and chunk.choices[0].logprobs:
            tokens += chunk.choices[0].logprobs.tokens
            offsets += chunk.choices[0].logprobs.text_offset
    assert len(tokens) == 8
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(8)]


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"suffix": "x"}, "suffix", "not supported"),
        ({"extra_body": {"prompt_logprobs": 1}, "stream": True}, "prompt_logprobs", "non-str"),
        ({"best_of": 3}, "best_of", "best_of"),
        ({"logprobs": 6}, "logprobs", "logprobs"),
        ({"prompt": [[1, 2], [3, 49152]]}, "prompt", "prompt[1]: token id 49152 is outside"),
        ({"prompt": []}, "prompt", "must not be empty"),
        ({"prompt": "word " * 9000}, "prompt", "too long"),  # the context is 8192
    ],
)
def test_bad_requests_are_400_naming_the_parameter(
    client: openai.OpenAI, default_server: Server, fields: dict, param: str, says: str
):
    body = {"prompt": PROMPT, "max_tokens": 4, **fields}
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, **body)
    error = caught.value.body
    assert error["param"] == param and says in error["message"]
    assert default_server.stats()["open_requests"] == 0


LOGLIKELIHOOD_TEXT = "The capital of France is Paris, and the capital of Italy is Rome."


def test_echo_with_logprobs_scores_the_prompt_as_transformers_does(
    client: openai.OpenAI, default_server: Server
):
    """lm-eval-harness's loglikelihood request: the prompt echoed with each token's logprob
    (the first has none) and the one generated token after it."""
    ids = token_ids(default_server, LOGLIKELIHOOD_TEXT)
    reply = client.completions.create(
        model=MODEL, prompt=ids, echo=True, logprobs=1, max_tokens=1, temperature=0
    )
    scored = client.completions.create(
        model=MODEL, prompt=ids, max_tokens=1, extra_body={"prompt_logprobs": 2}
    )
    [choice] = reply.choices
    logprobs = choice.logprobs
    assert choice.text.startswith(LOGLIKELIHOOD_TEXT)
    assert len(logprobs.tokens) == len(ids) + 1
    assert "".join(logprobs.tokens[: len(ids)]) == LOGLIKELIHOOD_TEXT
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    model_dir = resolve_model_dir(None)
    source = gguf_source(model_dir)
    assert source is not None
    # The served arithmetic (precision file: 8-bit activations per block), in process.
    ours = load_model(
        model_dir, torch.float32, torch.device("cpu"), quantization="gguf", int8_activations=True
    )
    expected = torch.log_softmax(sequence_logits(ours, ids), dim=-1)
    with torch.inference_mode():
        logits = transformers_from_gguf(source)(torch.tensor([ids])).logits[0]
    dequantized = torch.log_softmax(logits.float(), dim=-1)
    for position in range(1, len(ids)):
        want = float(expected[position - 1, ids[position]])
        # One forward over the whole prompt against the served prefill: summation order only.
        assert logprobs.token_logprobs[position] == pytest.approx(want, abs=2e-3)
        # And the file dequantized to float32: the activations' 8-bit rounding only (a token
        # scored at the wrong position would be off by nats).
        float32 = float(dequantized[position - 1, ids[position]])
        assert logprobs.token_logprobs[position] == pytest.approx(float32, abs=0.25)
    # vLLM's form of the same numbers: per position the prompt token's entry, ranked.
    vllm = (scored.choices[0].model_extra or {})["prompt_logprobs"]
    assert vllm[0] is None and len(vllm) == len(ids)
    for position in range(1, len(ids)):
        entry = vllm[position][str(ids[position])]
        assert entry["logprob"] == pytest.approx(logprobs.token_logprobs[position], abs=1e-5)
        rank = int((expected[position - 1] > expected[position - 1, ids[position]]).sum()) + 1
        assert abs(entry["rank"] - rank) <= 1  # near-ties may swap under the kernels' rounding
        assert len(vllm[position]) in (2, 3)  # two alternatives, the token among them or not
    # Streamed, the echoed prompt and its logprobs come first, then the generated token.
    stream = client.completions.create(
        model=MODEL, prompt=ids, echo=True, logprobs=1, max_tokens=1, temperature=0, stream=True
    )
    chunks = [chunk.choices[0] for chunk in stream if chunk.choices]
    assert "".join(chunk.text for chunk in chunks) == choice.text
    streamed = [lp for chunk in chunks if chunk.logprobs for lp in chunk.logprobs.token_logprobs]
    assert streamed[0] is None and len(streamed) == len(ids) + 1
    assert streamed[1:] == pytest.approx(logprobs.token_logprobs[1:], abs=1e-5)


def test_chat_prompt_logprobs_score_the_rendered_chat(
    client: openai.OpenAI, default_server: Server
):
    messages = [{"role": "user", "content": "Name a large city in France."}]
    reply = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=1, extra_body={"prompt_logprobs": 0}
    )
    rendered = httpx.post(f"{default_server.url}/tokenize", json={"messages": messages}).json()
    scored = client.completions.create(
        model=MODEL, prompt=rendered["tokens"], max_tokens=1, extra_body={"prompt_logprobs": 0}
    )
    chat = (reply.choices[0].model_extra or {})["prompt_logprobs"]
    raw = (scored.choices[0].model_extra or {})["prompt_logprobs"]
    assert len(chat) == reply.usage.prompt_tokens == len(rendered["tokens"])
    assert chat[0] is None
    for position, token in enumerate(rendered["tokens"][1:], start=1):
        assert chat[position][str(token)]["logprob"] == pytest.approx(
            raw[position][str(token)]["logprob"], abs=1e-5
        )
