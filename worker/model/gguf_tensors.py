"""A GGUF file's tensors as the file holds them: memory-mapped codes, never widened to float."""

from __future__ import annotations

import functools
import math
import mmap
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from worker.model.ggml_linear import QuantTensor
from worker.model.gguf_header import GgufFormatError, GgufHeader, TensorInfo, read_header
from worker.model.gguf_reader import (
    ROPE_FACTOR_TENSORS,
    add_longrope,
    config_from_metadata,
    gemma_norm_shift,
    hf_name,
    qk_heads,
    unpermute_rows,
)


class GgufFileError(ValueError):
    """A GGUF file that cannot be served, with the file and the cause named."""


def read_gguf_header(path: Path) -> GgufHeader:
    """The file's header; read once per version of the file (a load asks for it twice, and
    a tokenizer's string arrays take ~50 ms to step over). Callers must not change it."""
    try:
        stat = path.stat()
        return _header_of(path, stat.st_mtime_ns, stat.st_size)
    except (GgufFormatError, OSError) as exc:
        raise GgufFileError(f"{path}: not a readable GGUF file: {exc}") from exc


@functools.lru_cache(maxsize=4)
def _header_of(path: Path, mtime_ns: int, size: int) -> GgufHeader:
    return read_header(path)


def read_gguf_config(path: Path) -> dict[str, Any]:
    """The config dict of a GGUF file, as config.json would hold it, without its tensors."""
    header = read_gguf_header(path)
    config = _config(path, header)
    _row_layouts(path, header)  # every tensor's type known and its bytes inside the file
    names = {t.name: t for t in header.tensors}
    embed = names.get("token_embd.weight")
    if embed is None or len(embed.dims) != 2:
        raise GgufFileError(f"{path}: no 2-D token_embd.weight tensor")
    arch = str(header.metadata["general.architecture"])
    unknown = [
        t.name
        for t in header.tensors
        if _unknown_name(t.name, arch) and t.name not in ROPE_FACTOR_TENSORS
    ]
    if unknown:
        raise GgufFileError(f"{path}: tensors this architecture does not have: {unknown[:4]}")
    factors = {
        ROPE_FACTOR_TENSORS[t.name]: _floats(path, t)
        for t in header.tensors
        if t.name in ROPE_FACTOR_TENSORS
    }
    if factors:
        add_longrope(config, header.metadata, factors)
    config["vocab_size"] = int(embed.dims[1])
    config["tie_word_embeddings"] = "output.weight" not in names
    return config


@dataclass
class GgufWeights:
    """The tensors of a memory-mapped GGUF file, and the map they view."""

    tensors: dict[str, torch.Tensor | QuantTensor]
    mapping: mmap.mmap
    spans: dict[str, tuple[int, int]]  # each tensor's bytes in the file, by name

    def release(self, kept: Iterable[torch.Tensor], names: Iterable[str] | None = None) -> None:
        """Forget the named tensors (default: all) and drop from this process's resident
        pages those of their bytes that no kept tensor views.

        Why: copying a tensor into a kernel's own layout touches its pages of the map, which
        then count in the process's RSS as long as the map lives (a second copy of the
        weights). The kernels that read the file in place keep their pages; the rest are
        handed back (they stay in the page cache, unowned), each as soon as it is copied, so
        that the load's peak holds about one tensor twice, not every one."""
        base = _address(self.mapping)
        views = [
            (t.data_ptr() - base, t.data_ptr() - base + t.nbytes)
            for t in kept
            if base <= t.data_ptr() < base + len(self.mapping)
        ]
        for name in list(self.spans) if names is None else names:
            self.tensors.pop(name, None)
            start, end = self.spans[name]
            if not any(a < end and start < b for a, b in views):
                _hand_back(self.mapping, start, end)


def _hand_back(mapping: mmap.mmap, start: int, end: int) -> None:
    """Drop from this process's resident set the pages wholly inside [start, end): a page
    shared with a neighbouring tensor stays with it."""
    page = mmap.PAGESIZE
    first = -(-start // page) * page
    if end - first >= page:
        mapping.madvise(mmap.MADV_DONTNEED, first, (end - first) // page * page)


def _address(mapping: mmap.mmap) -> int:
    return int(np.frombuffer(mapping, dtype=np.uint8).ctypes.data)


def read_gguf_tensors(path: Path) -> GgufWeights:
    """Tensors under Hugging Face names: F32 ones as float32 torch tensors, every other type
    as a QuantTensor; both view the memory-mapped file (llama's q/k rows are copied, in
    rotate-half order). The map lives as long as any tensor that views it."""
    from gguf import GGMLQuantizationType

    header = read_gguf_header(path)
    config = _config(path, header)
    arch = str(header.metadata["general.architecture"])
    norm_shift = gemma_norm_shift(arch)
    with path.open("rb") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    data = np.frombuffer(mapping, dtype=np.uint8)
    tensors: dict[str, torch.Tensor | QuantTensor] = {}
    spans: dict[str, tuple[int, int]] = {}
    for info, (rows, cols, row_bytes) in zip(
        header.tensors, _row_layouts(path, header), strict=True
    ):
        if info.name in ROPE_FACTOR_TENSORS:  # the config's, read by read_gguf_config
            continue
        try:
            name = hf_name(info.name, arch)
        except ValueError as exc:
            raise GgufFileError(f"{path}: {exc}") from exc
        kind = GGMLQuantizationType(info.type)
        spans[name] = (info.offset, info.offset + rows * row_bytes)
        raw = _view(data, info, rows * row_bytes).view(rows, row_bytes)
        heads = qk_heads(name, config) if config["model_type"] == "llama" else 0
        value: torch.Tensor | QuantTensor
        if kind == GGMLQuantizationType.F32:
            value = raw.view(torch.float32).reshape(tuple(reversed(info.dims)))
            if heads:
                value = value.index_select(0, unpermute_rows(value.shape[0], heads))
            if norm_shift and name.endswith("norm.weight"):
                value = value - norm_shift  # Hugging Face's value; the loaders add it back
        else:
            if len(info.dims) != 2:
                raise GgufFileError(f"{path}: tensor {info.name} of type {kind.name} is not 2-D")
            value = QuantTensor(int(kind), kind.name, raw, rows, cols)
            if heads:
                value = value.take_rows(unpermute_rows(rows, heads))
        if heads:  # copied in rotate-half order: its file pages are not needed again
            _hand_back(mapping, *spans[name])
        tensors[name] = value
    return GgufWeights(tensors, mapping, spans)


def dequantized_rows(
    path: Path, gguf_name: str, rows: Sequence[int] | None = None
) -> torch.Tensor | None:
    """The `rows` of a tensor (all of them for None) as float32 (len(rows), row length),
    read from the file alone: a reranker's few head rows, not the table around them. None
    where the file has no such tensor."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    header = read_gguf_header(path)
    for info, (count, cols, row_bytes) in zip(
        header.tensors, _row_layouts(path, header), strict=True
    ):
        if info.name != gguf_name:
            continue
        picked = list(range(count)) if rows is None else list(rows)
        if any(not 0 <= r < count for r in picked):
            raise GgufFileError(f"{path}: tensor {gguf_name} has no row among {picked}")
        data = np.memmap(path, np.uint8, "r", offset=info.offset, shape=(count, row_bytes))
        raw = np.ascontiguousarray(data[picked])
        values = dequantize(raw, GGMLQuantizationType(info.type))
        return torch.from_numpy(np.asarray(values, dtype=np.float32).reshape(len(picked), cols))
    return None


def _floats(path: Path, info: TensorInfo) -> list[float]:
    """An F32 vector's values (LongRoPE's factors), read from the file."""
    from gguf import GGMLQuantizationType

    if info.type != GGMLQuantizationType.F32 or len(info.dims) != 1:
        raise GgufFileError(f"{path}: tensor {info.name} must be a 1-D F32 vector")
    values = np.fromfile(path, dtype=np.float32, count=int(info.dims[0]), offset=info.offset)
    return [float(v) for v in values]


def _config(path: Path, header: GgufHeader) -> dict[str, Any]:
    try:
        return config_from_metadata(header.metadata)
    except (ValueError, TypeError) as exc:
        raise GgufFileError(f"{path}: {exc}") from exc


def _row_layouts(path: Path, header: GgufHeader) -> list[tuple[int, int, int]]:
    """(rows, row length, row bytes) of each tensor; GgufFileError naming the first one whose
    type is unknown, whose rows split a block, or whose bytes run past the end of the file."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    layouts = []
    for info in header.tensors:
        try:
            kind = GGMLQuantizationType(info.type)
        except ValueError as exc:
            raise GgufFileError(f"{path}: tensor {info.name}: {exc}") from exc
        block, block_bytes = GGML_QUANT_SIZES[kind]
        cols, rows = info.dims[0], math.prod(info.dims[1:])
        if cols % block:
            raise GgufFileError(f"{path}: tensor {info.name} rows of {cols} split {kind.name}")
        row_bytes = cols // block * block_bytes
        end = info.offset + rows * row_bytes
        if end > header.file_size:
            raise GgufFileError(
                f"{path}: truncated: tensor {info.name} ends at byte {end}, "
                f"the file at {header.file_size}"
            )
        layouts.append((rows, cols, row_bytes))
    return layouts


def _view(data: np.ndarray[Any, Any], info: TensorInfo, size: int) -> torch.Tensor:
    """The tensor's bytes in the read-only map: the weights are only ever read."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "non-writable array"
        return torch.from_numpy(data[info.offset : info.offset + size])


def _unknown_name(gguf_name: str, arch: str) -> bool:
    try:
        hf_name(gguf_name, arch)
    except ValueError:
        return True
    return False


def dequantized_state(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor as float32 under Hugging Face names: the reference path (tests, float
    serving by request), several times the file's size in memory. The gguf package's numpy
    code dequantizes, independently of the kernels."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    state = {}
    for name, value in read_gguf_tensors(path).tensors.items():
        if isinstance(value, QuantTensor):
            kind = GGMLQuantizationType(value.type)
            values = np.asarray(dequantize(value.data.numpy(), kind), dtype=np.float32)
            state[name] = torch.from_numpy(values.reshape(value.rows, value.cols))
        else:
            state[name] = value.clone()  # F32 tensors view the map; the state owns its memory
    return state
