"""A GGUF file's metadata and tensor directory, read without parsing its vocabulary.

Why not gguf's GGUFReader: it turns every metadata array into numpy parts when it opens a
file: seconds for the default model's 49k-token vocabulary and merges (docs/BENCHMARKS.md,
Figures behind the code), more for Llama 3's 128k. Serving needs the scalar keys and where
each tensor lies; the tokenizer is read once by transformers and cached. The type sizes
come from the gguf package's constants.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

GGUF_MAGIC = b"GGUF"
# GGUF value types: 0-7 and 10-12 scalars, 8 string, 9 array.
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9
# What transformers' conversion of a file's tokenizer reads: the tokenizer's keys and the
# architecture (which picks the converter).
_TOKENIZER_PREFIX, _ARCHITECTURE = "tokenizer.", "general.architecture"


class GgufFormatError(ValueError):
    """The bytes are not a GGUF file this reader understands (named in the message)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # GGUF's order: ne0 (the row length) first
    type: int  # a gguf.GGMLQuantizationType value
    offset: int  # from the start of the file


@dataclass(frozen=True)
class GgufHeader:
    metadata: dict[str, Any]  # string arrays are left out (None): only the tokenizer has them
    tensors: list[TensorInfo]
    file_size: int
    # sha256 of the bytes of the architecture and every tokenizer key-value pair: files that
    # share it (a model's quantizations) convert to the same tokenizer.
    tokenizer_digest: str


class _Cursor:
    def __init__(self, buffer: mmap.mmap) -> None:
        self.buffer, self.at = buffer, 0

    def unpack(self, fmt: str) -> Any:
        try:
            (value,) = struct.unpack_from(fmt, self.buffer, self.at)
        except struct.error as exc:
            raise GgufFormatError(f"truncated at byte {self.at}") from exc
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        size = self.unpack("<Q")
        if self.at + size > len(self.buffer):
            raise GgufFormatError(f"a string of {size} bytes runs past the end at {self.at}")
        raw = self.buffer[self.at : self.at + size]
        self.at += size
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        buffer, at, end = self.buffer, self.at, len(self.buffer)
        for _ in range(count):
            if at + 8 > end:
                raise GgufFormatError(f"truncated string array at byte {at}")
            at += 8 + int.from_bytes(buffer[at : at + 8], "little")
        self.at = at

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise GgufFormatError(f"unknown metadata value type {kind} at byte {self.at}")
        item, count = self.unpack("<I"), self.unpack("<Q")
        if item == _STRING:
            self.skip_strings(count)
            return None
        if item not in _SCALARS:
            raise GgufFormatError(f"array of value type {item} at byte {self.at}")
        width = struct.calcsize(_SCALARS[item])
        if self.at + count * width > len(self.buffer):
            raise GgufFormatError(f"an array of {count} values runs past the end at {self.at}")
        values = np.frombuffer(self.buffer, _SCALARS[item], count, self.at).tolist()
        self.at += count * width
        return values


def read_header(path: Path) -> GgufHeader:
    """Metadata and tensor directory of `path`; GgufFormatError for anything malformed."""
    with path.open("rb") as handle:
        try:
            buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as exc:  # an empty file cannot be mapped
            raise GgufFormatError("the file is empty") from exc
    with buffer:
        cursor = _Cursor(buffer)
        if buffer[:4] != GGUF_MAGIC:
            raise GgufFormatError("no GGUF magic at the start")
        cursor.at = 4
        version = cursor.unpack("<I")
        if version not in (2, 3):
            raise GgufFormatError(f"GGUF version {version}; versions 2 and 3 are read")
        tensor_count, kv_count = cursor.unpack("<Q"), cursor.unpack("<Q")
        metadata: dict[str, Any] = {}
        tokenizer = hashlib.sha256()
        for _ in range(kv_count):
            start = cursor.at
            key = cursor.string()
            metadata[key] = cursor.value(cursor.unpack("<I"))
            if key.startswith(_TOKENIZER_PREFIX) or key == _ARCHITECTURE:
                tokenizer.update(buffer[start : cursor.at])
        infos = []
        for _ in range(tensor_count):
            name = cursor.string()
            ndims = cursor.unpack("<I")
            if ndims > 4:
                raise GgufFormatError(f"tensor {name} has {ndims} dimensions")
            dims = tuple(cursor.unpack("<Q") for _ in range(ndims))
            infos.append((name, dims, cursor.unpack("<I"), cursor.unpack("<Q")))
        alignment = int(metadata.get("general.alignment", 32))
        start = cursor.at + (-cursor.at % alignment)
        tensors = [TensorInfo(n, d, t, start + o) for n, d, t, o in infos]
        return GgufHeader(metadata, tensors, len(buffer), tokenizer.hexdigest())
