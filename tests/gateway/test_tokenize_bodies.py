"""/tokenize and /detokenize bodies: what parses, and 400s naming the parameter's path."""

from typing import Any

import pytest

from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.tokenize_body import DetokenizeBody, TokenizeBody


def test_good_bodies_parse():
    assert TokenizeBody.parse({"prompt": "Hi", "model": "m", "add_special_tokens": True}) == (
        TokenizeBody(prompt="Hi", model="m")
    )
    assert DetokenizeBody.parse({"tokens": [1, 2]}).tokens == [1, 2]


@pytest.mark.parametrize(
    ("model", "body", "param"),
    [
        (TokenizeBody, [], None),
        (TokenizeBody, {}, "prompt"),
        (TokenizeBody, {"prompt": ""}, "prompt"),
        (TokenizeBody, {"prompt": 5}, "prompt"),
        (TokenizeBody, {"prompt": "a\ud800"}, "prompt"),
        (TokenizeBody, {"prompt": "Hi", "model": "\udfff"}, "model"),
        (DetokenizeBody, {}, "tokens"),
        (DetokenizeBody, {"tokens": None}, "tokens"),
        (DetokenizeBody, {"tokens": []}, "tokens"),
        (DetokenizeBody, {"tokens": "abc"}, "tokens"),
        (DetokenizeBody, {"tokens": [1, -2]}, "tokens.1"),
        (DetokenizeBody, {"tokens": [2**64]}, "tokens.0"),
        (DetokenizeBody, {"tokens": [1.0]}, "tokens.0"),
    ],
)
def test_bad_bodies_are_400s_naming_the_path(model: Any, body: Any, param: str | None):
    with pytest.raises(GatewayError) as caught:
        model.parse(body)
    error = caught.value
    assert (error.kind, error.param) == (ErrorKind.INVALID_REQUEST, param)
    assert error.message.startswith(param or "request body")
