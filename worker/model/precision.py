"""Which dtype and quantization a model runs with on a device, from the request and the weights."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from safetensors import safe_open

from worker.kernels.build import native_kernels_available
from worker.kernels.ggml_build import ggml_kernels_available
from worker.kernels.kernel_table import NATIVE_TYPES
from worker.machine.cpu_info import has_native_bf16
from worker.model.block_linear import pack_blocks
from worker.model.gguf_tensors import read_gguf_header
from worker.model.model_dir import gguf_source

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_has_bf16() -> bool:
    return has_native_bf16()


def resolve_quantization(
    requested: str | None, model_dir: Path, device: torch.device
) -> tuple[str | None, bool]:
    """(quantization, exact_only) for the engine's `quantization` option.

    "auto" is "gguf" for a GGUF file on the CPU (each tensor in its own codes, nothing lost)
    when every tensor type it holds has a kernel here; "q4_1" with exact_only on a CPU with
    the native kernels when a folder's weights lie on a Q4_1 grid; no quantization otherwise.
    "none" and None mean none.
    """
    if requested in (None, "none"):
        return None, False
    source = gguf_source(model_dir)
    if requested == "auto" and source is not None:
        if device.type != "cpu":
            return None, False
        missing = _types_without_kernels(source)
        if not missing:
            return "gguf", False
        log.warning(
            "no kernel here for the %s tensors of %s: dequantizing the file to float, "
            "several times its size in memory",
            "/".join(missing),
            source.name,
        )
        return None, False
    if requested != "auto":
        if requested == "q4_1" and not native_kernels_available():
            raise ValueError(
                "quantization q4_1 needs the native CPU kernels, which could not be built "
                "here (see the warning above); use int4, int8 or none"
            )
        return requested, False
    if device.type != "cpu" or not native_kernels_available():
        return None, False
    name = "model.layers.0.self_attn.q_proj.weight"
    for file in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            if name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                weight = handle.get_tensor(name).float()
                break
    else:
        return None, False
    on_grid = weight.shape[1] % 32 == 0
    on_grid = on_grid and torch.equal(pack_blocks(weight, "q4_1").dequantized, weight)
    return ("q4_1", True) if on_grid else (None, False)


def resolve_dtype(name: str, device: torch.device, quantization: str | None = None) -> torch.dtype:
    """auto = bfloat16 on CUDA or a CPU with native bf16 (AVX512-BF16/AMX), else float32;
    always float32 under q4_1 and gguf, whose kernels take float32 activations."""
    if name == "auto":
        if quantization in ("q4_1", "gguf"):
            return torch.float32
        if device.type == "cuda" or (device.type == "cpu" and cpu_has_bf16()):
            return torch.bfloat16
        return torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype must be auto or one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


def _types_without_kernels(gguf_file: Path) -> list[str]:
    """The quantized tensor types of a GGUF file that no kernel available here computes."""
    from gguf import GGMLQuantizationType

    header = read_gguf_header(gguf_file)
    kinds = {GGMLQuantizationType(t.type).name for t in header.tensors}
    kinds.discard("F32")
    if ggml_kernels_available():
        return []
    if native_kernels_available():
        kinds -= NATIVE_TYPES.keys()
    return sorted(kinds)
