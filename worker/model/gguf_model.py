"""A LlamaModel whose layers compute in a GGUF file's own codes: no float copy of any weight.

Each linear layer takes the kernel worker/kernels/kernel_table.py routes its tensors' types to
on this CPU: our block kernels (Q4_1, Q8_0, Q5_0, Q5_1), ggml's kernels and our K-quant gemv and
panels for the other quantized types (worker.model.ggml_linear), F32 a float32 layer. A type
with no kernel on this machine is refused, naming the tensor; nothing falls back to float
silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from worker.kernels.ggml_build import ggml_kernels_available
from worker.kernels.kernel_table import NATIVE_TYPES, KernelTable, LayerRoute
from worker.kernels.layout import (
    q5_0_blocks_from_q4_0,
    q8_0_blocks_from_q5_0,
    records_from_gguf,
)
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

# Each fused layer of ours and the checkpoint tensors it is made of, in order.
FUSED = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "self_attn.o_proj": ("self_attn.o_proj",),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
    "mlp.down_proj": ("mlp.down_proj",),
}

Weight = torch.Tensor | QuantTensor


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
    table = KernelTable(plan.kquant_panel_rows, int8_activations, tiles_rows=plan.kquant_tiles_rows)
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
    head_layer = _linear(gguf_path, tensors, [head_name], plan, table, "")
    tied = head_layer if head_name == embed_name else None
    model.embed_tokens = _embedding(gguf_path, embed, tied, table)  # type: ignore[assignment]
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
            layer = _linear(gguf_path, tensors, names, plan, table)
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
    model.weight_paths = table.describe()
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
    gguf_path: Path, table: Weight, head: nn.Module | None, kernels: KernelTable
) -> nn.Module:
    """The token embedding; `head`: the output layer, when it is the same table (tied)."""
    if isinstance(table, torch.Tensor):
        kernels.record("F32", "rows read from the file")
        return FloatEmbedding(table)
    if isinstance(head, BlockLinear):  # the head's records are the one copy of the table
        kernels.record(table.type_name, "rows read from the output layer's records")
        return RecordsEmbedding(head.records, head.block_format, table.rows)
    if head is not None and grouped_q6k_head(head):
        kernels.record(table.type_name, "rows read from the output layer's grouped copy")
        return GroupedQ6KEmbedding(head)
    if ggml_kernels_available():
        kernels.record(table.type_name, "rows read by ggml")
        return GgmlEmbedding(table)
    if table.type_name not in NATIVE_TYPES:
        _require_ggml(gguf_path, "token_embd.weight", table.type_name)
    # Without ggml, our own types' rows are read out of records, as a tied head's are.
    block_format = NATIVE_TYPES[table.type_name]
    kernels.record(table.type_name, "rows read from records (no ggml here)")
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
    table: KernelTable,
    suffix: str = ".weight",
) -> nn.Module:
    """One (fused) layer from the named tensors, on the kernels the table routes them to."""
    parts = [_take(gguf_path, tensors, f"{name}{suffix}") for name in names]
    biases = [tensors.get(f"{name}.bias") for name in names] if suffix else []
    bias = None
    if any(b is not None for b in biases):
        bias = torch.cat([_float(gguf_path, tensors, f"{n}.bias") for n in names])
    if all(isinstance(p, torch.Tensor) for p in parts):
        floats = [p for p in parts if isinstance(p, torch.Tensor)]
        weight = floats[0] if len(floats) == 1 else torch.cat(floats)  # one part: the file's
        table.record("F32", "float32 layers", len(parts))
        return PackedLinear(weight.contiguous(), bias, float32_layout=plan.float32_layout)
    quant = [_as_quant(p) for p in parts]
    route = table.layer({q.type_name for q in quant})
    if route.kind != "ggml":
        for q in quant:
            table.record(q.type_name, table.layer_kernel(route, q.type_name))
        return _block_linear(quant, bias, route, plan)
    for name, q in zip(names, quant, strict=True):
        _require_ggml(gguf_path, name, q.type_name)
    routes = table.parts(quant)
    for q, part in zip(quant, routes, strict=True):
        table.record(q.type_name, table.part_kernel(part))
    return GgmlLinear(quant, bias, routes)


def _block_linear(
    quant: Sequence[QuantTensor], bias: torch.Tensor | None, route: LayerRoute, plan: KernelPlan
) -> BlockLinear:
    """A layer on our block kernels: the parts' blocks as records of `route.block_format`
    (Q5_0 parts as Q8_0 codes, Q4_0 ones as Q5_0 codes, where the route says so)."""
    if route.kind == "q8_0 of q5_0":
        raw = torch.cat([_q8_0_rows(q) for q in quant])
    elif route.kind == "q5_0 of q4_0":
        raw = torch.cat([_q5_0_rows(q) for q in quant])
    else:
        raw = quant[0].data if len(quant) == 1 else torch.cat([q.data for q in quant])
    records = records_from_gguf(raw, route.block_format)
    return BlockLinear(records, bias, route.block_format, plan.panel_rows, route.int8)


def _q5_0_rows(weight: QuantTensor) -> torch.Tensor:
    """A Q5_0 or Q4_0 tensor's rows in Q5_0's blocks."""
    return q5_0_blocks_from_q4_0(weight.data) if weight.type_name == "Q4_0" else weight.data


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
