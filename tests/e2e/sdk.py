"""The official SDKs pointed at a test server, and the default model's name."""

from __future__ import annotations

import anthropic
import openai

from tests.e2e.harness import Server

MODEL = "SmolLM2-135M-Instruct"


def ask(prompt: str) -> list[dict[str, str]]:
    """One user turn."""
    return [{"role": "user", "content": prompt}]


def openai_client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def anthropic_client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


def prompt_tokens(usage: anthropic.types.Usage | anthropic.types.beta.BetaUsage) -> int:
    """The whole prompt of an Anthropic answer: its three parts, as the API splits them."""
    return (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
