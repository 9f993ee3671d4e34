"""Load model weights from a model folder (safetensors, or its GGUF file) into a LlamaModel."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from worker.kernels.plan import KernelPlan
from worker.model.config import ModelConfig
from worker.model.gguf_model import load_gguf_model
from worker.model.gguf_tensors import dequantized_state
from worker.model.llama import LlamaModel
from worker.model.materialize import materialize
from worker.model.model_dir import gguf_source
from worker.model.rope import qkv_row_order

FLOAT32_COPY_MAX_BYTES = 4 << 30


def load_config(model_dir: Path) -> ModelConfig:
    hf = json.loads((model_dir / "config.json").read_text())
    generation = model_dir / "generation_config.json"
    if generation.is_file():
        eos = json.loads(generation.read_text()).get("eos_token_id")
        if eos is not None:
            hf = {**hf, "eos_token_id": eos}
    return ModelConfig.from_hf(hf)


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
    config: ModelConfig | None = None,
    int8_activations: bool = False,
) -> LlamaModel:
    """Build the decoder and fill it from the folder's *.safetensors files (or its GGUF).

    `pack` lays the linear weights out for the fastest kernels (inference only), or
    quantizes them (`quantization="int8"` or `"int4"`); with `float32_head`, a bf16/fp16 model still
    computes its logits in float32. `float32_copy` (None: automatic, for bf16/fp16 models on
    the CPU whose float32 copy stays under FLOAT32_COPY_MAX_BYTES) keeps float32 weights too,
    for batched matmuls. `quantization="gguf"` computes in a GGUF folder's own codes
    (worker.model.gguf_model); any other form of a GGUF folder starts from its weights
    dequantized in memory, the reference path. `config` replaces the folder's own (a context
    stretched by worker.model.config.with_context). `int8_activations`: a GGUF's Q4_1 and Q8_0
    layers round their activations to 8 bits per block, as ggml computes the file.
    """
    config = config or load_config(model_dir)
    if quantization == "gguf":
        source = gguf_source(model_dir)
        if source is None:
            raise ValueError(f"quantization gguf needs a GGUF file, and {model_dir} is a folder")
        return load_gguf_model(source, config, device, plan, int8_activations)
    with torch.device("meta"):
        model = LlamaModel(config).to(dtype=dtype)
    materialize(model, device)  # a tied embedding and head stay one parameter
    model.build_rope_tables(device)
    state = _as_causal_lm(_read_safetensors(model_dir))
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
    source = gguf_source(model_dir)
    if source is not None:
        return dequantized_state(source)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                state[name] = handle.get_tensor(name)
    return state


def _as_causal_lm(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A base model's tensors (as transformers' AutoModel saves them, which is how
    sentence-transformers saves a decoder embedder) named as a causal LM's, and a classifier's
    (...ForSequenceClassification) without its `score` head, which worker/model/score_head.py
    reads; without an output layer of its own, the embedding table stands in for it (an
    embedding's or a classifier's logits are never read)."""
    if any(name.startswith("score.") for name in hf):
        decoder = {name: t for name, t in hf.items() if not name.startswith("score.")}
        table = decoder.get("model.embed_tokens.weight")
        if "lm_head.weight" not in decoder and table is not None:
            decoder["lm_head.weight"] = table
        return decoder
    if any(name.startswith("model.") for name in hf) or "embed_tokens.weight" not in hf:
        return hf
    named = {f"model.{name}": tensor for name, tensor in hf.items() if name != "lm_head.weight"}
    named["lm_head.weight"] = hf.get("lm_head.weight", hf["embed_tokens.weight"])
    return named


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
    qkv_order = qkv_row_order(config)
    for i in range(config.num_layers):
        prefix = f"model.layers.{i}."
        for target, sources in fused.items():
            for kind in ("weight", "bias"):
                name = f"layers.{i}.{target}.{kind}"
                if f"model.{name}" in hf:  # fused in the checkpoint already (Phi-3)
                    continue
                names = [f"{prefix}{source}.{kind}" for source in sources]
                if kind == "bias" and names[0] not in hf:
                    continue
                ours[name] = torch.cat([take(n) for n in names])
        for kind in ("weight", "bias"):
            name = f"layers.{i}.self_attn.qkv_proj.{kind}"
            if qkv_order is not None and name in ours:
                ours[name] = ours[name].index_select(0, qkv_order)
    if config.tie_word_embeddings:
        ours["lm_head.weight"] = take("model.embed_tokens.weight")
    if config.norm_offset:
        for name, tensor in ours.items():
            if name.endswith("norm.weight"):
                ours[name] = tensor + config.norm_offset
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
