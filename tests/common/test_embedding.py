"""A vector's wire form: float32 little-endian bytes, the bytes OpenAI's base64 holds."""

import base64
import struct

import pytest

from common.embedding import pack_vector, unpack_vector


def test_a_vector_is_its_float32_values_little_endian():
    values = [0.1, -2.5, 3e-8, 1e30]
    raw = pack_vector(values)
    assert raw == struct.pack("<4f", *values)
    assert unpack_vector(raw) == list(struct.unpack("<4f", raw))  # rounded to float32
    # What OpenAI's SDK decodes a base64 embedding with (numpy's "float32" on a
    # little-endian machine, or `array("f")` read as little-endian).
    assert struct.unpack("<4f", base64.b64decode(base64.b64encode(raw))) == tuple(
        unpack_vector(raw)
    )


def test_bytes_that_are_not_whole_float32_values_are_refused():
    with pytest.raises(ValueError, match="multiple of 4 bytes, got 7"):
        unpack_vector(b"\x00" * 7)
