"""Which dtype and quantization a model runs with on a device, from the request and the weights."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from worker.kernels.build import native_kernels_available
from worker.machine.cpu_info import has_native_bf16
from worker.model.block_linear import pack_blocks

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_has_bf16() -> bool:
    return has_native_bf16()


def resolve_quantization(
    requested: str | None, model_dir: Path, device: torch.device
) -> tuple[str | None, bool]:
    """(quantization, exact_only) for the engine's `quantization` option.

    "auto" is "q4_1" with exact_only on a CPU with the native kernels when the model's
    weights already lie on a Q4_1 grid (a Q4_1 GGUF file: its own codes, nothing lost), and
    no quantization otherwise. "none" and None mean none.
    """
    if requested in (None, "none"):
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
    always float32 under q4_1, whose kernels take float32 activations."""
    if name == "auto":
        if quantization == "q4_1":
            return torch.float32
        if device.type == "cuda" or (device.type == "cpu" and cpu_has_bf16()):
            return torch.bfloat16
        return torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype must be auto or one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]
