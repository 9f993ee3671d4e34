"""PackedLinear: a frozen linear layer with its weight laid out for the fastest kernel."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def mkldnn_linear_supports(dtype: torch.dtype) -> bool:
    """Whether oneDNN's packed linear takes this dtype on this CPU.

    Float32 wherever torch has oneDNN. Its bf16 and fp16 paths need AVX-512 (BW, VL, DQ) or
    AVX-NE-CONVERT; elsewhere they raise at packing time, so a plain AVX2 CPU takes F.linear,
    which works anywhere.
    """
    if not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return dtype == torch.float32


# From this many rows on, a bf16 layer on the CPU multiplies in float32 when it keeps a
# float32 copy: below, reading half the bytes wins (memory bound); above, this CPU's
# float32 FMA throughput is about twice its bf16 one (compute bound; docs/bench/HISTORY.md,
# "Goals, and where we stand").
FLOAT32_FROM_ROWS = 16


class PackedLinear(nn.Module):
    """Inference-only replacement for nn.Linear, chosen per device and dtype.

    Float32 layers take the layout `float32_layout` names ("mm": `x @ w_t` with the weight
    stored transposed, "linear": F.linear, "mkldnn": oneDNN's packed weight), which the
    kernel probe measures per CPU (worker/kernels/plan.py): the fastest differs from one CPU
    to another. bf16/fp16 go through oneDNN with a prepacked weight (faster than F.linear
    for one row) where the CPU has it (mkldnn_linear_supports). CUDA keeps F.linear. Figures:
    docs/BENCHMARKS.md, Figures behind the code.
    With `float32_copy`, a bf16/fp16 CPU layer also keeps its weights as float32 and uses
    them for batches of FLOAT32_FROM_ROWS rows or more (prefill, busy decode steps).
    """

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        float32_copy: bool = False,
        float32_layout: str = "mm",
    ) -> None:
        super().__init__()
        self.in_features = weight.shape[1]
        self.out_features = weight.shape[0]
        self.bias = None if bias is None else bias.detach()
        self.kind = self._pick_kind(weight, float32_layout)
        self.weight_f32: torch.Tensor | None = None
        self.bias_f32: torch.Tensor | None = None
        if float32_copy and weight.device.type == "cpu" and weight.dtype != torch.float32:
            self.weight_f32 = weight.detach().float().t().contiguous()  # (in, out)
            self.bias_f32 = None if bias is None else bias.detach().float()
        if self.kind == "mm":
            self.weight = weight.detach().t().contiguous()  # (in, out)
        elif self.kind == "mkldnn":
            # The batch-size hint only tunes the packed layout; any number of rows works.
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)
        else:
            self.weight = weight.detach()

    @staticmethod
    def _pick_kind(weight: torch.Tensor, float32_layout: str) -> str:
        if weight.device.type != "cpu":
            return "linear"
        if weight.dtype == torch.float32:
            return float32_layout
        if mkldnn_linear_supports(weight.dtype):
            return "mkldnn"
        return "linear"

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> PackedLinear:
        return cls(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight_f32 is not None and x.shape[0] >= FLOAT32_FROM_ROWS:
            x = x.float()
            if self.bias_f32 is None:
                out = torch.mm(x, self.weight_f32)
            else:
                out = torch.addmm(self.bias_f32, x, self.weight_f32)
            # Stays float32: the next consumers (attention in prefill, the next float32
            # layer, the float32 residual) want it so, and the KV write casts on its own.
            return out
        if self.kind == "mm":
            if self.bias is None:
                return torch.mm(x, self.weight)
            return torch.addmm(self.bias, x, self.weight)
        if self.kind == "mkldnn":
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        dual = ", float32 copy" if self.weight_f32 is not None else ""
        return f"in={self.in_features}, out={self.out_features}, kind={self.kind}{dual}"
