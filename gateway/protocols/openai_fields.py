"""The body fields both OpenAI routes take (sampling, stops, logit bias, streaming), typed."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, PlainValidator

from common.sampling_fields import MAX_N, MAX_STOP_CHARS, MAX_TOP_LOGPROBS
from common.sampling_params import SamplingParams
from common.validation import (
    INT64_MAX,
    INT64_MIN,
    MAX_COUNT,
    boolean,
    check_text,
    integer,
    invalid,
    json_type,
    number,
    show,
    text,
)
from gateway.errors import GatewayError
from gateway.protocols.bodies import (
    NO_TOOLS,
    RequestBody,
    ToolSettings,
    checked_params,
    string_list,
)

MAX_STOPS = 4  # OpenAI's own limit (the engine takes up to 16)
MAX_LOGIT_BIAS_ENTRIES = 1024

Bool = Annotated[bool, boolean()]
Count = Annotated[int, integer(0, None, MAX_COUNT)]
PositiveCount = Annotated[int, integer(1, None, MAX_COUNT)]


def _stop(value: Any) -> tuple[str, ...]:
    """`stop`: one non-empty string, or an array of at most four."""
    if isinstance(value, str):
        if not value:
            raise invalid("must be a non-empty string")
        return (check_text(value, max_chars=MAX_STOP_CHARS),)
    if not isinstance(value, list):
        raise invalid(f"must be a string or an array of strings, got {json_type(value)}")
    return tuple(string_list(MAX_STOPS, MAX_STOP_CHARS)(value))


def token_ids(value: Any, at: str = "") -> list[int]:
    """A non-empty JSON array of token ids (integers in [0, 2**31 - 1]); the vocabulary is
    the worker's to check. `at`: where the array sits below the validated value."""
    if not isinstance(value, list):
        raise invalid(f"must be an array of token ids, got {json_type(value)}", at)
    if not value:
        raise invalid("must not be empty", at)
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= MAX_COUNT:
            reason = f"must be a token id (an integer >= 0), got {show(token)}"
            raise invalid(reason, f"{at}.{i}" if at else str(i))
    return value


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
    """`logit_bias`: {"token id": bias in [-100, 100]} as ((id, bias), ...) pairs."""
    if not isinstance(value, dict):
        raise invalid(f"must be an object, got {json_type(value)}")
    if len(value) > MAX_LOGIT_BIAS_ENTRIES:
        raise invalid(f"may hold at most {MAX_LOGIT_BIAS_ENTRIES} entries, got {len(value)}")
    pairs: list[tuple[int, float]] = []
    for key, bias in value.items():
        if not key.isascii() or not key.isdigit() or len(key) > 10 or int(key) > MAX_COUNT:
            raise invalid(f"keys must be token ids, got {show(key)}")
        ok = isinstance(bias, (int, float)) and not isinstance(bias, bool)
        if not ok or not -100 <= bias <= 100:  # also NaN
            raise invalid(f"must be a number in [-100, 100], got {show(bias)}", key)
        pairs.append((int(key), float(bias)))
    return tuple(pairs)


def _stop_token_ids(value: Any) -> list[int]:
    return [] if value == [] else token_ids(value)


class StreamOptions(BaseModel):
    include_usage: Bool | None = None


class OpenAISampling(RequestBody):
    """What /v1/chat/completions and /v1/completions share."""

    model: Annotated[str, text()] | None = None
    temperature: Annotated[float, number(0, 2)] | None = None
    top_p: Annotated[float, number(0, 1, low_open=True)] | None = None
    top_k: Annotated[int, integer(-1, None, MAX_COUNT)] | None = None  # vLLM; -1 and 0: off
    n: Annotated[int, integer(1, MAX_N)] | None = None
    min_tokens: Count | None = None
    min_p: Annotated[float, number(0, 1)] | None = None
    presence_penalty: Annotated[float, number(-2, 2)] | None = None
    frequency_penalty: Annotated[float, number(-2, 2)] | None = None
    repetition_penalty: Annotated[float, number(0, low_open=True)] | None = None
    seed: Annotated[int, integer(INT64_MIN, INT64_MAX)] | None = None
    stop: Annotated[tuple[str, ...], PlainValidator(_stop)] | None = None
    stop_token_ids: Annotated[list[int], PlainValidator(_stop_token_ids)] | None = None
    ignore_eos: Bool | None = None
    logit_bias: Annotated[tuple[tuple[int, float], ...], PlainValidator(_logit_bias)] | None = None
    stream: Bool | None = None
    stream_options: StreamOptions | None = None
    # vLLM's: each prompt token's logprob (and this many alternatives), as `prompt_logprobs`
    # of each choice; non-streamed answers only.
    prompt_logprobs: Annotated[int, integer(0, MAX_TOP_LOGPROBS)] | None = None

    def check_prompt_logprobs(self) -> None:
        """A prompt's logprobs come in a non-streamed answer only."""
        if self.prompt_logprobs is not None and self.stream:
            message = "prompt_logprobs is returned in non-streamed responses only"
            raise GatewayError.invalid(message, "prompt_logprobs")

    def sampling_params(
        self,
        *,
        max_tokens: int | None,
        prompt_logprobs: int | None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        structured_output: dict[str, Any] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        tools: ToolSettings = NO_TOOLS,
    ) -> SamplingParams:
        """The fields both routes share, and what the route made of its own; n is always
        given, for the gateway's own count of choices."""
        return checked_params(
            tools,
            n=self.n or 1,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=None if self.top_k is None else max(self.top_k, 0),  # -1 is off, as 0
            min_tokens=self.min_tokens,
            min_p=self.min_p,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            repetition_penalty=self.repetition_penalty,
            seed=self.seed,
            stop=self.stop,
            stop_token_ids=tuple(self.stop_token_ids) if self.stop_token_ids else None,
            ignore_eos=self.ignore_eos,
            logit_bias=self.logit_bias or None,
            prompt_logprobs=prompt_logprobs,
            max_tokens=max_tokens,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
            structured_output=structured_output,
            chat_template_kwargs=chat_template_kwargs,
        )

    @property
    def include_usage(self) -> bool:
        """`stream_options.include_usage`; stream_options without a stream is a 400."""
        if self.stream_options is None:
            return False
        if not self.stream:
            message = "stream_options is only allowed when stream is true"
            raise GatewayError.invalid(message, "stream_options")
        return bool(self.stream_options.include_usage)
