"""Request bodies as pydantic models: parse one into its model, or a 400 naming the path.

Keys outside a protocol's spec are ignored; keys of the spec this server does not implement
are listed per model in `unsupported` and refused by name, so nothing documented is ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from common.errors import RequestError
from common.sampling_params import SamplingParams
from common.validation import check_text, describe, invalid, json_type
from gateway.errors import GatewayError

Body = TypeVar("Body", bound="RequestBody")
MAX_TOOLS = 128  # tools in one request
# Spec parameters this server does not implement: name → which values are still fine.
Unsupported = dict[str, Callable[[Any], bool]]


def _not_null(value: Any) -> Any:
    """A required field given as null is as missing as an absent one."""
    if value is None:
        raise invalid("is required")
    return value


Required = BeforeValidator(_not_null)  # Annotated[list[X], Required]: null is "is required"


def is_null(value: Any) -> bool:
    return value is None


class RequestBody(BaseModel):
    """A protocol's body: its known fields typed, other keys ignored."""

    model_config = ConfigDict(extra="ignore")
    # Refused unless allowed(value): null, or the value that means "off".
    unsupported: ClassVar[Unsupported] = {}

    @classmethod
    def parse(cls: type[Body], body: Any) -> Body:
        if not isinstance(body, dict):
            raise GatewayError.invalid("request body must be a JSON object")
        for key, allowed in cls.unsupported.items():
            if key in body and not allowed(body[key]):
                raise GatewayError.invalid(f"{key} is not supported by this server", key)
        try:
            return cls.model_validate(body)
        except ValidationError as exc:
            param, message = describe(exc)
            raise GatewayError.invalid(message, param) from None


class ToolSettings(NamedTuple):
    """A request's tools in the worker's terms (gateway/protocols/tools.py); all None when
    it gives none."""

    tools: tuple[dict[str, Any], ...] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None


NO_TOOLS = ToolSettings()


def checked_params(tools: ToolSettings = NO_TOOLS, **settings: Any) -> SamplingParams:
    """The request's SamplingParams from the values its body's model checked, typed as the
    struct's fields (None: not given). Those checks were the settings' one check at this
    edge; what is left is the rule across fields, a 400 naming the field."""
    try:
        return SamplingParams.of_checked(
            tools=tools.tools,
            tool_choice=tools.tool_choice,
            parallel_tool_calls=tools.parallel_tool_calls,
            **settings,
        )
    except RequestError as exc:
        raise GatewayError.invalid(str(exc), exc.param) from None


def string_list(
    max_items: int | None = None, max_chars: int | None = None
) -> Callable[[Any], list[str]]:
    """A validator of a JSON array of non-empty strings, at most `max_items` of at most
    `max_chars` characters each."""

    def check(value: Any) -> list[str]:
        if not isinstance(value, list):
            raise invalid(f"must be an array of strings, got {json_type(value)}")
        if max_items is not None and len(value) > max_items:
            raise invalid(f"may hold at most {max_items} strings, got {len(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                raise invalid("must be a non-empty string", str(i))
            check_text(item, at=str(i), max_chars=max_chars)
        return list(value)

    return check
