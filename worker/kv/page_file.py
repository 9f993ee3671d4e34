"""One KV page as a file: a header naming what it holds, the k/v bytes, and their checksum."""

from __future__ import annotations

import os
import struct
import threading
import zlib
from array import array
from collections.abc import Sequence
from hashlib import blake2b
from pathlib import Path

import torch

# A file is trusted only when every header field matches what the reader expects and the
# payload's CRC-32 matches: a file of another model or setting (identity), another page
# (digest), another shape (length), a truncated or a flipped one is never served. Files are
# written under a temporary name and renamed into place, so a writer killed mid-write leaves
# only a temporary file, which no reader opens.

MAGIC = b"AKVP"
FORMAT_VERSION = 1
HEADER = struct.Struct("<4sI16s16sQI")  # magic, version, identity, page digest, length, crc32
DIGEST_BYTES = 16
SUFFIX = ".kv"
TEMP_SUFFIX = ".tmp"


def chain_digest(parent: bytes, tokens: Sequence[int]) -> bytes:
    """A page's name: its parent page's digest chained with its own tokens. Unlike the
    in-memory index's hash it is the same in every process and on every start."""
    token_bytes = array("i", tokens).tobytes()  # token ids are below 2**31
    return blake2b(parent + token_bytes, digest_size=DIGEST_BYTES).digest()


def prompt_digests(tokens: Sequence[int], num_pages: int, page_size: int) -> list[bytes]:
    """The chained digests of the first `num_pages` full pages of `tokens`."""
    digests: list[bytes] = []
    parent = b""
    for i in range(num_pages):
        parent = chain_digest(parent, tokens[i * page_size : (i + 1) * page_size])
        digests.append(parent)
    return digests


def file_name(digest: bytes) -> str:
    return digest.hex() + SUFFIX


def write_page(path: Path, identity: bytes, digest: bytes, payload: memoryview) -> int:
    """Write one page file atomically; returns the bytes written. OSError on failure, with
    no file left behind under either name."""
    header = HEADER.pack(
        MAGIC, FORMAT_VERSION, identity, digest, payload.nbytes, zlib.crc32(payload)
    )
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}{TEMP_SUFFIX}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            _write_all(fd, memoryview(header))
            _write_all(fd, payload)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return HEADER.size + payload.nbytes


def _write_all(fd: int, data: memoryview) -> None:
    while data.nbytes:
        data = data[os.write(fd, data) :]


def read_page(path: Path, identity: bytes, digest: bytes, into: memoryview) -> bool:
    """Fill `into` (the payload's exact size) from the page file; False, `into` unspecified,
    when the file is missing, of another identity, page or size, truncated or corrupt."""
    try:
        with path.open("rb", buffering=0) as file:
            header = file.read(HEADER.size)
            if len(header) != HEADER.size:
                return False
            magic, version, their_identity, their_digest, length, crc = HEADER.unpack(header)
            if (magic, version, their_identity, their_digest, length) != (
                MAGIC,
                FORMAT_VERSION,
                identity,
                digest,
                into.nbytes,
            ):
                return False
            filled = 0
            while filled < into.nbytes and (n := file.readinto(into[filled:])):
                filled += n
            if filled != into.nbytes or file.read(1):
                return False
    except OSError:
        return False
    return zlib.crc32(into) == int(crc)


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's bytes, shared, not copied."""
    return tensor.reshape(-1).view(torch.uint8).numpy().data
