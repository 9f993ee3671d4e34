"""Several served names and trailing-* patterns: which model a name means, what
/v1/models lists, and a client's built-in name answered by the served model."""

from __future__ import annotations

from common.schemas import Accepted, Finished, Message, Register, Submit, Tokens
from common.token_output import FinishReason
from gateway.registry import WorkerRegistry
from tests.gateway.in_process import in_process


def registry_of(*workers: tuple[str, tuple[str, ...]]) -> WorkerRegistry:
    registry = WorkerRegistry()
    for i, (model, aliases) in enumerate(workers):
        message = Register(f"w{i}", "a", model, 512, 4, 100, 16, 1, "h", aliases)
        registry.register(f"w{i}".encode(), message, 0.0)
    return registry


def test_names_aliases_and_the_longest_pattern_resolve_in_that_order():
    registry = registry_of(
        ("smol", ("claude-*", "gpt-4o")),
        ("big", ("claude-opus-*", "smol-alias")),
        ("smol", ("claude-*", "extra")),  # a second worker of smol adds its own alias
    )
    assert registry.served_names() == {
        "big": ("big", "claude-opus-*", "smol-alias"),
        "smol": ("smol", "claude-*", "gpt-4o", "extra"),
    }
    assert [
        registry.resolve(name)
        for name in ("smol", "big", "gpt-4o", "extra", "claude-sonnet-4-5", "claude-opus-5-5")
    ] == ["smol", "big", "smol", "smol", "smol", "big"]
    assert registry.resolve("claude") is None
    assert registry.resolve("gpt-4o-mini") is None


def test_a_plain_alias_wins_over_a_pattern_that_also_matches():
    registry = registry_of(("a", ("x-*",)), ("b", ("x-1",)))
    assert registry.resolve("x-1") == "b"
    assert registry.resolve("x-2") == "a"


def hello(submit: Submit) -> list[Message]:
    rid = submit.request_id
    return [
        Accepted(rid, prompt_tokens=3),
        Tokens(rid, 0, "Hi", [11]),
        Finished(rid, 0, FinishReason.STOP, prompt_tokens=3, completion_tokens=1, cached_tokens=0),
    ]


async def test_models_lists_every_name_and_a_pattern_routes_to_the_model():
    async with in_process(hello, aliases=("claude-*", "gpt-4o")) as run:
        listed = (await run.client.get("/v1/models")).json()["data"]
        assert [(m["id"], m["root"]) for m in listed] == [
            ("scripted", "scripted"),
            ("claude-*", "scripted"),
            ("gpt-4o", "scripted"),
        ]
        body = {"model": "claude-opus-5-5", "max_tokens": 4}
        body["messages"] = [{"role": "user", "content": "hi"}]
        answer = await run.client.post("/v1/messages?beta=true", json=body)
        assert answer.status_code == 200
        assert answer.json()["model"] == "scripted"  # the model's own name, as vLLM answers
        chat = {"model": "gpt-4o", "messages": body["messages"]}
        assert (await run.client.post("/v1/chat/completions", json=chat)).status_code == 200
        missing = await run.client.post("/v1/messages", json={**body, "model": "gemini"})
        assert missing.status_code == 404
        assert missing.json()["error"] == {
            "type": "not_found_error",
            "message": "model 'gemini' is not served here; available: scripted, claude-*, gpt-4o",
        }
        assert len(run.worker.submits) == 2
