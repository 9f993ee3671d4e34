"""What an embeddings request asks beyond its inputs, and the wire form of a vector: float32,
little-endian, as OpenAI's base64 encoding holds it."""

from __future__ import annotations

import array
import sys
from collections.abc import Sequence
from dataclasses import dataclass

# OpenAI's `encoding_format: base64` is these bytes; msgpack carries them as one bin value,
# a quarter of the bytes of a list of msgpack doubles.
_LITTLE_ENDIAN = sys.byteorder == "little"


@dataclass(frozen=True)
class EmbedSettings:
    """Submit.embed: embed the prompts instead of generating. `dimensions`: keep the first
    that many components, scaled back to unit length (None: all of them)."""

    dimensions: int | None = None


def pack_vector(values: Sequence[float]) -> bytes:
    """float32 little-endian bytes of `values` (rounded to float32)."""
    packed = array.array("f", values)
    if not _LITTLE_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def unpack_vector(raw: bytes) -> list[float]:
    """The floats of pack_vector's bytes; ValueError unless whole float32 values."""
    if len(raw) % 4:
        raise ValueError(f"a float32 vector is a multiple of 4 bytes, got {len(raw)}")
    values = array.array("f")
    values.frombytes(raw)
    if not _LITTLE_ENDIAN:
        values.byteswap()
    return values.tolist()
