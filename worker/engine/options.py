"""EngineOptions: every knob of an InferenceEngine, checked when it is built."""

from __future__ import annotations

from dataclasses import dataclass

from worker.model.quantizations import QUANTIZATIONS

KV_CACHE_KINDS = ("paged", "contiguous")
QUANTIZATION_CHOICES = ("auto", "none", *QUANTIZATIONS)


@dataclass(frozen=True)
class EngineOptions:
    device: str = "cpu"
    dtype: str = "auto"
    kv_cache: str = "paged"
    page_size: int = 16
    kv_cache_mb: int = 1024
    max_seqs: int = 64
    max_model_len: int | None = None  # default: the model's context
    prefill_token_budget: int = 512
    enable_prefix_caching: bool = True
    num_threads: int | None = None
    served_model_name: str | None = None  # the name clients ask for; default: from the path
    # "auto": a Q4_1 GGUF's own codes in the native CPU kernels (q4_1, nothing lost), else
    # none. "q4_1": Q4_1 layers and a Q8_0 output layer whatever the weights (CPU only).
    # "int8": W8A8 linear layers, faster at large batches and less exact; "int4": 4-bit
    # weights for few-row steps (CPU only), float32 for batches. None or "none": float.
    quantization: str | None = "auto"
    # torch.compile the decode step of < 16 sequences: faster single streams, a slower
    # start (about a minute per graph on 2 cores, less once inductor's cache is warm).
    compile: bool = False

    def __post_init__(self) -> None:
        if self.kv_cache not in KV_CACHE_KINDS:
            raise ValueError(f"kv_cache must be one of {KV_CACHE_KINDS}, got {self.kv_cache!r}")
        for name in ("page_size", "kv_cache_mb", "max_seqs", "prefill_token_budget"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.quantization not in (None, *QUANTIZATION_CHOICES):
            raise ValueError(
                f"quantization must be None or one of {QUANTIZATION_CHOICES}, "
                f"got {self.quantization!r}"
            )
        if self.quantization in ("int4", "q4_1") and self.device != "cpu":
            raise ValueError(
                f"quantization {self.quantization} runs on the CPU only; use int8 or none on GPUs"
            )
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
