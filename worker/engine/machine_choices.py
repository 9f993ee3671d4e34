"""MachineChoices: what an engine runs with on this machine, decided once at load and logged."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from worker.engine.options import EngineOptions
from worker.kernels.build import kernel_isa
from worker.kernels.plan import KernelPlan, kernel_plan
from worker.machine.cpu_info import describe as describe_cpu
from worker.model.config import ModelConfig
from worker.model.kernel_probe import measure
from worker.model.precision import resolve_dtype, resolve_quantization


@dataclass(frozen=True)
class MachineChoices:
    device: torch.device
    quantization: str | None  # resolved: None, "gguf", "q4_1", "int8" or "int4"
    exact_only: bool  # q4_1 only where it keeps the checkpoint's values exactly
    # A GGUF's Q4_1 / Q8_0 layers on 8-bit activations (precision "file"), as ggml computes it.
    int8_activations: bool
    dtype: torch.dtype
    plan: KernelPlan | None  # the CPU's measured kernel choice; None off the CPU
    attention: str  # "flex" (the cache read in place) or "gather"

    @classmethod
    def resolve(
        cls, options: EngineOptions, model_dir: Path, config: ModelConfig | None = None
    ) -> MachineChoices:
        device = torch.device(options.device)
        quantization, exact_only = resolve_quantization(options.quantization, model_dir, device)
        int8_activations = quantization == "gguf" and options.precision == "file"
        plan = kernel_plan(measure) if device.type == "cpu" else None
        if plan is not None and options.compile and plan.float32_layout == "mkldnn":
            # torch.compile cannot trace oneDNN's packed weights; the next best layout.
            plan = dataclasses.replace(plan, float32_layout="mm")
        dtype = resolve_dtype(options.dtype, device, quantization)
        attention = options.attention
        # The in-place plan carries one mask for every layer, and flex's score function is
        # not given the soft cap: Gemma's layers gather their contexts.
        plain = config is None or (not config.has_mixed_windows and config.attn_softcap is None)
        plain = plain and options.kv_cache_dtype != "q8_0"  # flex reads float rows only
        if attention == "auto":
            attention = "flex" if device.type == "cuda" and plain else "gather"
        elif attention == "flex" and not plain:
            raise ValueError(
                "attention flex is not implemented for this model's attention (sliding "
                "layers among full ones, or soft-capped scores); use attention gather"
            )
        return cls(device, quantization, exact_only, int8_activations, dtype, plan, attention)

    def describe(self) -> str:
        """The startup line that says which kernels and layouts this machine got."""
        attention = {
            "flex": "attention: flex_attention over the pages in place",
            "gather": "attention: contexts gathered",
        }[self.attention]
        if self.device.type != "cpu":
            quantization = self.quantization or "none"
            return f"device {self.device}, {self.dtype}, quantization {quantization}, {attention}"
        weights = {
            None: f"{self.dtype} weights",
            "gguf": "the GGUF file's own codes, "
            + (
                "precision file (8-bit activations per block, as llama.cpp computes the file)"
                if self.int8_activations
                else "precision exact (float32 activations where a kernel takes them)"
            ),
            "q4_1": "the file's own Q4_1 codes" if self.exact_only else "Q4_1 blocks (requantized)",
            "int4": "int4 (torch's kernel)",
            "int8": "int8 W8A8",
        }[self.quantization]
        isa = kernel_isa()
        native = f"native kernels built for it ({isa})" if isa else "torch's kernels"
        plan = f"; {self.plan.describe()}" if self.plan is not None else ""
        return f"CPU {describe_cpu()}: {weights}, {native}{plan}; {attention}"
