"""A LlamaModel whose layers compute in a GGUF file's own codes: no float copy of any weight.

Each linear layer takes the fastest kernel its tensors' type has here: Q4_1 and Q8_0 our
native block kernels (worker/kernels/csrc, float32 activations, panels at batch), every other
quantized type ggml's dot products (worker.model.ggml_linear), F32 a float32 layer. A type with
no kernel on this machine is refused, naming the tensor; nothing falls back to float silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from worker.kernels.build import int8_block_kernels_available, native_kernels_available
from worker.kernels.ggml_build import ggml_isa, ggml_kernels_available
from worker.kernels.kquant_probe import gemv_isa
from worker.kernels.layout import q8_0_blocks_from_q5_0, records_from_gguf
from worker.kernels.plan import KernelPlan
from worker.machine.heap import release_freed_heap
from worker.model.block_linear import BlockLinear
from worker.model.config import ModelConfig
from worker.model.ggml_linear import (
    GgmlEmbedding,
    GgmlLinear,
    GroupedQ6KEmbedding,
    QuantTensor,
    grouped_q6k_head,
)
from worker.model.gguf_tensors import GgufFileError, read_gguf_tensors
from worker.model.linear import PackedLinear
from worker.model.llama import LlamaModel
from worker.model.materialize import materialize
from worker.model.rope import qkv_row_order
from worker.model.table_embedding import FloatEmbedding, RecordsEmbedding

# Our own kernels for these GGUF types; ggml's for the other quantized ones.
NATIVE_TYPES = {"Q4_1": "q4_1", "Q8_0": "q8_0"}
FIVE_BIT_TYPES = ("Q5_0", "Q5_1")  # our kernels with 8-bit activations only
# Each fused layer of ours and the checkpoint tensors it is made of, in order.
FUSED = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "self_attn.o_proj": ("self_attn.o_proj",),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    "mlp.down_proj": ("mlp.down_proj",),
}

Weight = torch.Tensor | QuantTensor


class WeightPaths:
    """Which kernel each tensor type took, counted, for the startup line."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def add(self, type_name: str, path: str, tensors: int = 1) -> None:
        self.counts[(type_name, path)] += tensors

    def describe(self) -> str:
        return ", ".join(
            f"{kind} x{count} → {path}" for (kind, path), count in sorted(self.counts.items())
        )


def load_gguf_model(
    gguf_path: Path,
    config: ModelConfig,
    device: torch.device,
    plan: KernelPlan | None = None,
    int8_activations: bool = False,
) -> LlamaModel:
    """The decoder in float32 with every weight in the file's codes (CPU only); with
    `int8_activations`, our Q4_1 / Q8_0 kernels round the activations to 8 bits per block as
    ggml does (the file's own arithmetic, as the other types already compute), else they
    multiply float32 activations."""
    if device.type != "cpu":
        raise ValueError("a GGUF's own codes run on the CPU; on CUDA it is dequantized at load")
    plan = plan or KernelPlan()
    weights = read_gguf_tensors(gguf_path)
    tensors = weights.tensors
    qkv_order = qkv_row_order(config)  # Phi-3's partial rotary: q/k dims reordered
    for name, value in tensors.items():
        if qkv_order is not None and ".self_attn.qkv_proj." in name:
            tensors[name] = (
                value.take_rows(qkv_order)
                if isinstance(value, QuantTensor)
                else value.index_select(0, qkv_order)
            )
    paths = WeightPaths()
    with torch.device("meta"):
        model = LlamaModel(config)
    # The norms, copied first: a read of the map maps the pages around it (on recent kernels
    # a whole large folio of the page cache), so once the layers' pages are handed back a
    # norm read would map tens of MiB of them again for a few KiB.
    norms = {
        name: _float(gguf_path, tensors, f"model.{name}") + config.norm_offset
        for name, _ in model.named_parameters()
        if name.endswith("norm.weight")
    }
    # The output layer first: its table is the largest tensor, and copying one holds it
    # twice (its file pages, handed back once it is copied, and the copy), so the load's
    # peak is least with nothing else built yet.
    embed_name = "model.embed_tokens.weight"
    head_name = "lm_head.weight" if "lm_head.weight" in tensors else embed_name
    embed = _take(gguf_path, tensors, embed_name)
    head_layer = _linear(gguf_path, tensors, [head_name], plan, paths, int8_activations, "")
    tied = head_layer if head_name == embed_name else None
    model.embed_tokens = _embedding(gguf_path, embed, tied, paths)  # type: ignore[assignment]
    # A tied table's embedding reads the head's copy, or the file (F32, woven types): then
    # its pages go back too, and come back only for the rows looked up.
    weights.release(_held_tensors(head_layer), [head_name])
    model.lm_head = nn.Identity()  # type: ignore[assignment]  # the packed head replaces it
    for i, block in enumerate(model.blocks):
        for target, sources in FUSED.items():
            fused_name = f"model.layers.{i}.{target}"
            if f"{fused_name}.weight" in tensors:  # fused in the file already (Phi-3)
                sources = (target,)
            names = [f"model.layers.{i}.{source}" for source in sources]
            owner_path, attr = target.rsplit(".", 1)
            layer = _linear(gguf_path, tensors, names, plan, paths, int8_activations)
            setattr(block.get_submodule(owner_path), attr, layer)
            parts = [f"{name}.{kind}" for name in names for kind in ("weight", "bias")]
            weights.release(_held_tensors(layer), [n for n in parts if n in tensors])
        # A layer's temporaries (a fused weight's concatenation, a copy into a kernel's
        # layout) are freed between the kernels' allocations, in holes the C heap keeps
        # mapped: handed back each block, they do not add up to the load's peak.
        release_freed_heap()
    materialize(model, device)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in norms:
                param.copy_(norms.pop(name))
    model.build_rope_tables(device)
    model.install_head(head_layer, takes_float32=True)
    model.weight_paths = paths.describe()
    weights.release(_held_tensors(model))
    return model.eval()


def _held_tensors(module: nn.Module) -> list[torch.Tensor]:
    """The tensors a module and its children hold that may view the file (oneDNN's packed
    weights have no storage of their own to view it with)."""
    found = [*module.parameters(), *module.buffers()]
    for sub in module.modules():
        for value in vars(sub).values():
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(item, torch.Tensor):
                    found.append(item)
    return [t for t in found if not t.is_mkldnn]


def _embedding(
    gguf_path: Path, table: Weight, head: nn.Module | None, paths: WeightPaths
) -> nn.Module:
    """The token embedding; `head`: the output layer, when it is the same table (tied)."""
    if isinstance(table, torch.Tensor):
        paths.add("F32", "rows read from the file")
        return FloatEmbedding(table)
    if isinstance(head, BlockLinear):  # the head's records are the one copy of the table
        paths.add(table.type_name, "rows read from the output layer's records")
        return RecordsEmbedding(head.records, head.block_format, table.rows)
    if head is not None and grouped_q6k_head(head):
        paths.add(table.type_name, "rows read from the output layer's grouped copy")
        return GroupedQ6KEmbedding(head)
    if ggml_kernels_available():
        paths.add(table.type_name, "rows read by ggml")
        return GgmlEmbedding(table)
    if table.type_name not in NATIVE_TYPES:
        _require_ggml(gguf_path, "token_embd.weight", table.type_name)
    # Without ggml, our own types' rows are read out of records, as a tied head's are.
    block_format = NATIVE_TYPES[table.type_name]
    paths.add(table.type_name, "rows read from records (no ggml here)")
    return RecordsEmbedding(
        records_from_gguf(table.data, block_format).records, block_format, table.rows
    )


def _take(gguf_path: Path, tensors: dict[str, Weight], name: str) -> Weight:
    if name not in tensors:
        raise GgufFileError(f"{gguf_path}: missing tensor {name!r}")
    return tensors[name]


def _float(gguf_path: Path, tensors: dict[str, Weight], name: str) -> torch.Tensor:
    value = _take(gguf_path, tensors, name)
    if isinstance(value, QuantTensor):
        raise GgufFileError(f"{gguf_path}: tensor {name} is {value.type_name}; norms must be F32")
    return value


def _require_ggml(gguf_path: Path, tensor: str, type_name: str) -> None:
    if not ggml_kernels_available():
        raise GgufFileError(
            f"{gguf_path}: tensor {tensor} is {type_name}, which needs ggml's CPU kernels, "
            "unavailable here (see the warning above; they build with cmake and g++)"
        )


def _linear(
    gguf_path: Path,
    tensors: dict[str, Weight],
    names: Sequence[str],
    plan: KernelPlan,
    paths: WeightPaths,
    int8_activations: bool,
    suffix: str = ".weight",
) -> nn.Module:
    """One (fused) layer from the named tensors, in the fastest kernel their types allow."""
    parts = [_take(gguf_path, tensors, f"{name}{suffix}") for name in names]
    biases = [tensors.get(f"{name}.bias") for name in names] if suffix else []
    bias = None
    if any(b is not None for b in biases):
        bias = torch.cat([_float(gguf_path, tensors, f"{n}.bias") for n in names])
    if all(isinstance(p, torch.Tensor) for p in parts):
        floats = [p for p in parts if isinstance(p, torch.Tensor)]
        weight = floats[0] if len(floats) == 1 else torch.cat(floats)  # one part: the file's
        paths.add("F32", "float32 layers", len(parts))
        return PackedLinear(weight.contiguous(), bias, float32_layout=plan.float32_layout)
    quant = [_as_quant(p) for p in parts]
    kinds = {q.type_name for q in quant}
    # Precision file where our block kernels lack 8-bit activations (no AVX2): ggml's kernels
    # compute the file's arithmetic instead, where they are here; else ours in float32.
    int8 = int8_activations and int8_block_kernels_available()
    ours = native_kernels_available() and (int8 == int8_activations or not ggml_kernels_available())
    activations = "8-bit" if int8 else "float32"
    kind = next(iter(kinds)) if len(kinds) == 1 else ""
    if ours and (kind in NATIVE_TYPES or (kind in FIVE_BIT_TYPES and int8)):
        raw = quant[0].data if len(quant) == 1 else torch.cat([q.data for q in quant])
        block_format = kind.lower()
        paths.add(kind, f"native {kind} kernel, {activations} activations", len(parts))
        records = records_from_gguf(raw, block_format)
        return BlockLinear(records, bias, block_format, plan.panel_rows, int8)
    if kinds <= {"Q5_0", "Q8_0"} and ours:
        # A layer of both (or float32 activations, which the Q5_0 kernel lacks): ggml's Q5_0
        # kernels take a call per row block and run at half our Q8_0 records' rate; the same
        # values as Q8_0 codes (34 bytes a block instead of 22) compute the same integer dot
        # products there.
        raw = torch.cat([_q8_0_rows(q) for q in quant])
        for q in quant:
            codes = " on its codes as Q8_0" if q.type_name == "Q5_0" else ""
            paths.add(q.type_name, f"native Q8_0 kernel{codes}, {activations} activations")
        return BlockLinear(records_from_gguf(raw, "q8_0"), bias, "q8_0", plan.panel_rows, int8)
    for name, q in zip(names, quant, strict=True):
        _require_ggml(gguf_path, name, q.type_name)
    layer = GgmlLinear(quant, bias, plan.kquant_panel_rows)
    for i, (q, rows) in enumerate(zip(quant, layer.part_panel_rows, strict=True)):
        path = f"ggml {'interleaved' if layer.woven[i] else 'vec_dot'} ({ggml_isa()})"
        if layer.on_gemv[i]:
            path = f"8-bit gemv ({gemv_isa()})"
        paths.add(q.type_name, f"{path}, panel kernel from {rows} rows" if rows else path)
    return layer


def _q8_0_rows(weight: QuantTensor) -> torch.Tensor:
    """A Q8_0 or Q5_0 tensor's rows in Q8_0's blocks."""
    return q8_0_blocks_from_q5_0(weight.data) if weight.type_name == "Q5_0" else weight.data


def _as_quant(weight: Weight) -> QuantTensor:
    """An F32 part of a layer whose other parts are quantized, as ggml's F32 type."""
    if isinstance(weight, QuantTensor):
        return weight
    from gguf import GGMLQuantizationType

    data = weight.float().contiguous().view(torch.uint8)
    rows, cols = weight.shape
    return QuantTensor(int(GGMLQuantizationType.F32), "F32", data, rows, cols)
