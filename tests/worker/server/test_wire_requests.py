"""Submit and Tokenize as engine calls: the exact replies, echoes included, and refusals."""

from dataclasses import dataclass, field
from typing import Any

from common.sampling_params import SamplingParams
from common.schemas import Accepted, Rejected, Submit, Tokens
from worker.errors import ContextLengthExceeded
from worker.server import wire_requests


@dataclass
class FakeEngine:
    """What wire_requests calls: raw prompts "tokenize" to one id per character."""

    queued: list[Any] = field(default_factory=list)

    def submit_prompts(self, prompts, params, sink, request_id) -> list[list[int]]:
        if any(p == "too long" for p in prompts):
            raise ContextLengthExceeded("prompt is too long", "prompt")
        self.queued.append((request_id, prompts, params.n))
        return [[ord(c) for c in p] if isinstance(p, str) else list(p) for p in prompts]

    def detokenize(self, token_ids: list[int]) -> str:
        return "".join(chr(t) for t in token_ids)


def sink(event: Any) -> None:
    raise AssertionError("no event is expected here")


def test_raw_prompts_are_accepted_with_their_total_token_count():
    engine = FakeEngine()
    replies = wire_requests.submit(
        engine, Submit("r", SamplingParams(n=2), prompts=["ab", [99]]), sink
    )
    assert replies == [Accepted("r", 3)]
    assert engine.queued == [("r", ["ab", [99]], 2)]


def test_echo_sends_each_choice_its_prompt_text_right_after_accepted():
    message = Submit("r", SamplingParams(n=2), prompts=["Hi", [0x4F, 0x4B]], echo=True)
    assert wire_requests.submit(FakeEngine(), message, sink) == [
        Accepted("r", 4),
        Tokens("r", 0, "Hi", []),
        Tokens("r", 1, "Hi", []),
        Tokens("r", 2, "OK", []),  # token ids echo as the text they spell
        Tokens("r", 3, "OK", []),
    ]


def test_refusals_keep_the_code_and_parameter():
    too_long = Submit("r", SamplingParams(), prompts=["too long"], echo=True)
    assert wire_requests.submit(FakeEngine(), too_long, sink) == [
        Rejected("r", "context_length_exceeded", "prompt is too long", "prompt")
    ]


def test_an_unexpected_failure_rejects_that_request_and_the_worker_goes_on():
    class BrokenEngine(FakeEngine):
        def submit_prompts(self, prompts, params, sink, request_id):
            raise KeyError("a bug in a chat template")

    [reply] = wire_requests.submit(
        BrokenEngine(), Submit("r", SamplingParams(), prompts=["x"]), sink
    )
    assert reply == Rejected("r", "internal", wire_requests.INTERNAL)
    assert "a bug" not in reply.message  # the details stay in the worker's log
