"""SamplingParams: one request's generation settings, validated when built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from common.structured_output import KINDS
from common.tool_calls import CHOICES
from worker.errors import RequestError

MAX_TOP_LOGPROBS = 20
MAX_LOGIT_BIAS = 100


@dataclass(frozen=True)
class SamplingParams:
    """How one request picks tokens and when it stops.

    Defaults follow the AstrAI GenerationRequest table (temperature 1.0, top_k 50, top_p
    1.0). temperature 0 is greedy; top_k 0 and top_p 1.0 switch those filters off.
    max_tokens None means "until a stop or the context is full".
    """

    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    min_p: float = 0.0
    max_tokens: int | None = None
    min_tokens: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    n: int = 1
    skip_special_tokens: bool = True
    # {"type": "json_object"} or {"type": "json_schema", "schema": {...}, "strict": bool}:
    # the output is constrained to it token by token (worker/grammar.py).
    structured_output: Mapping[str, Any] | None = None
    # Functions the model may call ({name, description, parameters, strict}), and whether it
    # must: "auto", "none", "required" or {"name": …}; its calls are constrained to them.
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: str | Mapping[str, Any] = "auto"
    parallel_tool_calls: bool = True
    # The chat ends with an assistant message the answer continues (the prefill idiom),
    # rather than a turn it answers.
    continue_final_message: bool = False
    # (token id, bias) pairs added to the logits before sampling (OpenAI's logit_bias).
    logit_bias: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        _check(self.temperature >= 0, "temperature", self.temperature, "must be >= 0")
        _check(isinstance(self.top_k, int) and self.top_k >= 0, "top_k", self.top_k, "must be >= 0")
        _check(0 < self.top_p <= 1, "top_p", self.top_p, "must be in (0, 1]")
        _check(0 <= self.min_p <= 1, "min_p", self.min_p, "must be in [0, 1]")
        if self.max_tokens is not None:
            _check(
                isinstance(self.max_tokens, int) and self.max_tokens >= 1,
                "max_tokens",
                self.max_tokens,
                "must be >= 1",
            )
        _check(self.min_tokens >= 0, "min_tokens", self.min_tokens, "must be >= 0")
        if self.max_tokens is not None:
            _check(
                self.min_tokens <= self.max_tokens,
                "min_tokens",
                self.min_tokens,
                f"must be <= max_tokens ({self.max_tokens})",
            )
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _check(-2 <= value <= 2, name, value, "must be in [-2, 2]")
        penalty = self.repetition_penalty
        _check(penalty > 0, "repetition_penalty", penalty, "must be > 0")
        _check(
            0 <= self.top_logprobs <= MAX_TOP_LOGPROBS,
            "top_logprobs",
            self.top_logprobs,
            f"must be in [0, {MAX_TOP_LOGPROBS}]",
        )
        _check(isinstance(self.n, int) and self.n >= 1, "n", self.n, "must be >= 1")
        for stop in self.stop:
            _check(isinstance(stop, str) and stop != "", "stop", stop, "must be non-empty strings")
        for i, tool in enumerate(self.tools):
            ok = isinstance(tool, Mapping) and isinstance(tool.get("name"), str)
            _check(ok, f"tools[{i}]", tool, "must be an object with a name")
        for pair in self.logit_bias:
            ok = (
                len(pair) == 2
                and isinstance(pair[0], int)
                and pair[0] >= 0
                and isinstance(pair[1], (int, float))
                and -MAX_LOGIT_BIAS <= pair[1] <= MAX_LOGIT_BIAS
            )
            _check(
                ok,
                "logit_bias",
                pair,
                f"must map token ids to [-{MAX_LOGIT_BIAS}, {MAX_LOGIT_BIAS}]",
            )
        choice = self.tool_choice
        ok = choice in CHOICES or (isinstance(choice, Mapping) and "name" in choice)
        _check(ok, "tool_choice", choice, f'must be one of {CHOICES} or {{"name": …}}')
        spec = self.structured_output
        if spec is not None:
            ok = isinstance(spec, Mapping) and spec.get("type") in KINDS
            _check(ok, "structured_output", spec, f"must be an object whose type is one of {KINDS}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    @property
    def calls_tools(self) -> bool:
        """The answer may be tool calls (and is constrained to well-formed ones)."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != 0
            or self.frequency_penalty != 0
            or self.repetition_penalty != 1
        )

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> SamplingParams:
        """Build from keyword arguments; an unknown one is a ValueError naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise RequestError(f"unknown sampling parameter {unknown[0]!r}", param=unknown[0])
        if isinstance(kwargs.get("stop"), str):
            kwargs["stop"] = (kwargs["stop"],)
        if kwargs.get("tools") is not None:
            kwargs["tools"] = tuple(kwargs["tools"])
        if kwargs.get("logit_bias") is not None:
            kwargs["logit_bias"] = tuple(tuple(pair) for pair in kwargs["logit_bias"])
        for name in ("stop", "stop_token_ids"):
            if name in kwargs and kwargs[name] is not None:
                kwargs[name] = tuple(kwargs[name])
            elif name in kwargs:
                kwargs[name] = ()
        return cls(**kwargs)


def _check(ok: bool, name: str, value: Any, rule: str) -> None:
    if not ok:
        raise RequestError(f"{name} {rule}, got {value!r}", param=name)
