"""The embedded default model through `astrai serve`, driven by both official SDKs."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.e2e.harness import Server, wait_until

pytestmark = pytest.mark.slow
MODEL = "SmolLM2-135M-Instruct"
# A question the default file answers right in either precision (under precision file, its
# default, "the capital of France" starts as llama-server's answer on the same file does:
# "L'Étoile, la Marseillaise", not Paris; README "Precision").
QUESTION = [{"role": "user", "content": "What is the capital of Germany?"}]


@pytest.fixture(scope="module")
def server(default_server: Server) -> Server:
    return default_server


def test_openai_sdk_answers_a_real_question(server: Server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=20, temperature=0
    )
    assert "Berlin" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=20, temperature=0, stream=True
    )
    assert "Berlin" in "".join(c.choices[0].delta.content or "" for c in stream)


def test_anthropic_sdk_answers_a_real_question(server: Server):
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    message = client.messages.create(
        model=MODEL, max_tokens=20, messages=QUESTION, extra_body={"temperature": 0}
    )
    assert "Berlin" in message.content[0].text
    assert message.stop_reason == "end_turn"
    with client.messages.stream(
        model=MODEL, max_tokens=20, messages=QUESTION, extra_body={"temperature": 0}
    ) as stream:
        text = "".join(stream.text_stream)
    assert "Berlin" in text


def test_stats_show_the_prefix_cache_at_work(server: Server):
    # Worker figures reach /stats with the next heartbeat (every 0.5 s).
    assert wait_until(lambda: server.stats()["total_tasks"] >= 4, 5)
    [worker] = server.stats()["workers"]
    assert worker["model"] == MODEL and worker["prefix_cache_hit_tokens"] > 0


def test_logit_bias_steers_the_tokens_and_a_bad_id_is_a_400(server: Server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    forced = client.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=3, temperature=0, logit_bias={"665": 100}
    )
    assert forced.choices[0].message.content == " there there there"  # token 665 is " there"
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=3, logit_bias={"99999999": 1}
        )
    assert caught.value.body["param"] == "logit_bias"


def test_stats_say_which_kernels_the_worker_runs(server: Server):
    """Its startup line, in /stats: the CPU, the precision, the kernel plan and each weight
    type's kernel (the default file is Q4_1, with a Q8_0 output layer)."""
    [worker] = server.stats()["workers"]
    kernels = worker["kernels"]
    assert kernels.startswith("CPU ") and "the GGUF file's own codes, precision file" in kernels
    assert (
        "weights by type: " in kernels and "Q4_1 x" in kernels and "native Q4_1 kernel" in kernels
    )
    assert kernels.endswith("; decode steps: every layer in one native call")
