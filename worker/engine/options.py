"""EngineOptions: every knob of an InferenceEngine, checked when it is built; its flags too."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.cli_options import option
from common.model_names import check_served_name
from worker.machine.cpu_info import has_int8_dot_product
from worker.model.pooling import POOLING_CHOICES
from worker.model.quantizations import WEIGHT_FORMS
from worker.text.reasoning_format import PARSER_CHOICES

KV_CACHE_KINDS = ("paged", "contiguous")
KV_CACHE_DTYPES = ("auto", "float32", "float16", "bfloat16", "q8_0")
QUANTIZATION_CHOICES = ("auto", "none", *WEIGHT_FORMS)
DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTENTION_CHOICES = ("auto", "flex", "gather")
ROPE_SCALING_CHOICES = ("linear", "yarn")
PRECISION_CHOICES = ("file", "exact")
DEFAULT_PRECISION = "file"


@dataclass(frozen=True)
class EngineOptions:
    """Fields with `option(...)` metadata are flags of `astrai worker` and `astrai serve`."""

    device: str = field(
        default="cpu",
        metadata=option("cpu, cuda or cuda:K (astrai serve: cuda puts worker i on cuda:i)"),
    )
    dtype: str = field(
        default="auto",
        metadata=option("weights and activations (auto: per device)", choices=DTYPES),
    )
    kv_cache: str = "paged"
    page_size: int = 16
    kv_cache_mb: int = field(default=1024, metadata=option("memory for the KV cache, in MiB"))
    # "auto": the weights' dtype (float32 on a CPU), whose cached rows are exactly what the
    # model computed. "float16" halves the memory per token and the bytes a decode step
    # reads from the cache, for values rounded to 11 significant bits; "q8_0" quarters them,
    # 8-bit codes with a scale per 32 values (worker/kv/kv_rows.py).
    kv_cache_dtype: str = field(
        default="auto",
        metadata=option(
            "cached k/v rows: auto (the weights' dtype), float32, float16 (half the memory "
            "and the attention's reads; rounded), bfloat16 or q8_0 (8-bit codes, a scale per "
            "32 values: about a quarter of float32's memory, disk and reads)",
            choices=KV_CACHE_DTYPES,
        ),
    )
    # The disk tier under the page cache (worker/kv/disk_tier.py): every prompt's full
    # pages, kept across restarts and shared by the workers of one host.
    kv_disk_dir: str | None = field(
        default=None,
        metadata=option(
            "folder of the KV cache's disk tier, which outlives the process and may be "
            "shared by the workers of one host (default: $ASTRAI_KV_DISK_DIR, else the cache "
            "folder's kv/, e.g. ~/.cache/astrai/kv)",
            metavar="DIR",
        ),
    )
    kv_disk_mb: int = field(
        default=4096,
        metadata=option(
            "disk for KV pages, least recently used dropped first; 0 turns the disk tier off",
            metavar="MB",
        ),
    )
    # "flex": torch's flex_attention reads every context where the cache holds it, steered
    # by a block mask made from the page tables (worker.model.paged_attention). "gather":
    # each context's rows are copied out first, then SDPA; on the CPU the native kernels
    # read decode contexts in place anyway, and flex there is torch's unfused reference.
    attention: str = field(
        default="auto",
        metadata=option(
            "how attention reads the KV cache: auto (flex on CUDA, gather elsewhere), flex "
            "(flex_attention over the pages in place) or gather (rows copied out, then SDPA)",
            choices=ATTENTION_CHOICES,
        ),
    )
    max_seqs: int = field(default=64, metadata=option("sequences decoded together at most"))
    max_model_len: int | None = field(
        default=None,
        metadata=option(
            "context length in tokens (default: the model's trained one; beyond it only "
            "with --rope-scaling)"
        ),
    )
    # Positions beyond the trained context: RoPE stretched by max_model_len / trained.
    rope_scaling: str | None = field(
        default=None,
        metadata=option(
            "stretch RoPE to a --max-model-len beyond the trained context: linear "
            "(positions interpolated) or yarn (low frequencies interpolated, high ones kept)",
            choices=ROPE_SCALING_CHOICES,
        ),
    )
    prefill_token_budget: int = field(
        default=256,
        metadata=option(
            "prompt tokens prefilled per scheduler step at most while streams decode (fewer "
            "where a step would outlast --prefill-step-ms)"
        ),
    )
    idle_prefill_token_budget: int = field(
        default=1024,
        metadata=option("the same while no stream decodes (a long prompt alone: fewer chunks)"),
    )
    # Every decoding stream waits for a step that carries prompt tokens: its size follows
    # from the steps' measured time too (worker/engine/prefill_pace.py), not one count for all
    # CPUs.
    prefill_step_ms: int = field(
        default=250,
        metadata=option(
            "while streams decode, feed fewer prompt tokens a step where it would last longer "
            "than this, from the steps' measured time (0: --prefill-token-budget always)"
        ),
    )
    enable_prefix_caching: bool = field(
        default=True,
        metadata=option(
            "do not reuse the KV pages of shared prompt prefixes", flag="--no-prefix-caching"
        ),
    )
    num_threads: int | None = field(
        default=None, metadata=option("torch CPU threads", flag="--threads")
    )
    # The first plain name names the model in answers (default: from the model's path);
    # the others, and trailing-* patterns (claude-*), are aliases (common/model_names.py).
    served_model_name: tuple[str, ...] = field(
        default=(),
        metadata=option(
            "names clients use for it, e.g. my-model 'claude-*': the first plain one names it "
            "in answers (default: from the model's path), the rest and trailing-* patterns "
            "are aliases"
        ),
    )
    # "auto": a GGUF file's own codes on the CPU (gguf: each tensor in its type's kernel,
    # nothing lost, no float copy), a folder's float weights otherwise. "gguf": the same, and
    # an error where a type has no kernel here. "q4_1": Q4_1 layers and a Q8_0 output layer
    # whatever the weights (CPU only).
    # "int8": W8A8 linear layers, faster at large batches and less exact (CPUs with VNNI or
    # AMX only: elsewhere torch's int8 matmul is a slow loop); "int4": 4-bit
    # weights for few-row steps (CPU only), float32 for batches. None or "none": float.
    quantization: str | None = field(
        default="auto",
        metadata=option(
            "auto: a GGUF's own codes on the CPU (gguf), else none; gguf: the same, refused "
            "where a tensor type has no kernel here; q4_1: "
            "Q4_1 layers + Q8_0 output layer for any model (CPU); int8: W8A8 linears (less "
            "exact); int4: torch's 4-bit kernel; none: float weights",
            choices=QUANTIZATION_CHOICES,
        ),
    )
    # "file": a GGUF's quantized layers compute as ggml computes the file, activations
    # rounded to 8 bits per block (Q8_1 / Q8_0 / Q8_K): llama.cpp's results, and on the CPU
    # the integer units' rate. "exact": our Q4_1 / Q8_0 kernels take float32 activations, so a
    # Q4_1 file's greedy tokens equal transformers' on the same weights.
    precision: str = field(
        default=DEFAULT_PRECISION,
        metadata=option(
            "a GGUF's arithmetic: file (8-bit activations per block, as llama.cpp computes "
            "it) or exact (float32 activations in the Q4_1 / Q8_0 kernels)",
            choices=PRECISION_CHOICES,
        ),
    )
    # A faster single stream for a slower start: about a minute per graph on 2 cores, less
    # once inductor's cache is warm.
    compile: bool = field(
        default=False,
        metadata=option(
            "torch.compile the decode step of < 16 sequences (faster; ~1-2 min more at start)"
        ),
    )

    speculative_tokens: int = field(
        default=8,
        metadata=option(
            "tokens drafted from a sequence's own text per step at most, verified in the "
            "same forward where the measured step cost says they pay (0: never)"
        ),
    )

    # Which tags split a reasoning model's thoughts from its answer (worker/text/
    # reasoning_format.py); auto: <think>…</think> where the chat template writes </think>.
    reasoning_parser: str = field(
        default="auto",
        metadata=option(
            "how reasoning is read out of chat answers: auto (<think>…</think> when the chat "
            "template writes </think>), qwen3, deepseek_r1 (output before </think> is "
            "reasoning even without <think>) or none (answers as they are)",
            choices=PARSER_CHOICES,
        ),
    )

    # How /v1/embeddings pools the final hidden states, or that /v1/rerank scores them
    # (worker/model/pooling_files.py): default, what the model's files state
    # (sentence-transformers, config.json, a GGUF's pooling_type).
    pooling: str | None = field(
        default=None,
        metadata=option(
            "pooling for /v1/embeddings, over what the model's files state: last (the last "
            "token's final hidden state), mean or cls (the first token's); or rank: a "
            "reranker for /v1/rerank; default: the files' (sentence-transformers modules.json, "
            "config.json's architectures, a GGUF's pooling_type), else none",
            choices=POOLING_CHOICES,
        ),
    )

    # Read by the worker at start (worker.text.chat_template.read_template_file).
    chat_template: str | None = field(
        default=None,
        metadata=option(
            "a Jinja chat template file used instead of the model's own (tokenizer_config.json, "
            "chat_template.jinja, or a GGUF's tokenizer.chat_template)",
            metavar="FILE",
        ),
    )

    def __post_init__(self) -> None:
        if isinstance(self.served_model_name, str):  # the engine API's one name
            object.__setattr__(self, "served_model_name", (self.served_model_name,))
        for name in self.served_model_name:
            check_served_name(name)
        if self.pooling not in (None, *POOLING_CHOICES):
            raise ValueError(
                f"pooling must be None or one of {POOLING_CHOICES}, got {self.pooling!r}"
            )
        if self.kv_cache not in KV_CACHE_KINDS:
            raise ValueError(f"kv_cache must be one of {KV_CACHE_KINDS}, got {self.kv_cache!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {self.kv_cache_dtype!r}"
            )
        if self.attention not in ATTENTION_CHOICES:
            raise ValueError(
                f"attention must be one of {ATTENTION_CHOICES}, got {self.attention!r}"
            )
        if self.attention == "flex" and self.compile and self.device == "cpu":
            raise ValueError(
                "attention flex with compile is refused on the CPU: inductor's CPU kernel for "
                "flex_attention fails to build for the compiled step's dynamic shapes; use "
                "attention auto (gather) there"
            )
        if self.kv_cache_dtype == "q8_0" and (self.attention == "flex" or self.compile):
            raise ValueError(
                "kv_cache_dtype q8_0 is read by the gather attention and the native decode "
                "kernels: it takes neither attention flex nor compile"
            )
        for name in (
            "page_size",
            "kv_cache_mb",
            "max_seqs",
            "prefill_token_budget",
            "idle_prefill_token_budget",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prefill_step_ms < 0:
            raise ValueError(f"prefill_step_ms must be >= 0, got {self.prefill_step_ms}")
        if self.kv_disk_mb < 0:
            raise ValueError(f"kv_disk_mb must be >= 0, got {self.kv_disk_mb}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.rope_scaling not in (None, *ROPE_SCALING_CHOICES):
            raise ValueError(
                f"rope_scaling must be None or one of {ROPE_SCALING_CHOICES}, "
                f"got {self.rope_scaling!r}"
            )
        if self.quantization not in (None, *QUANTIZATION_CHOICES):
            raise ValueError(
                f"quantization must be None or one of {QUANTIZATION_CHOICES}, "
                f"got {self.quantization!r}"
            )
        if self.precision not in PRECISION_CHOICES:
            raise ValueError(
                f"precision must be one of {PRECISION_CHOICES}, got {self.precision!r}"
            )
        if self.quantization in ("int4", "q4_1", "gguf") and self.device != "cpu":
            raise ValueError(
                f"quantization {self.quantization} runs on the CPU only; use int8 or none on GPUs"
            )
        if self.quantization == "int8" and self.device == "cpu" and not has_int8_dot_product():
            raise ValueError(
                "quantization int8 needs a CPU with an int8 dot-product instruction "
                "(AVX512-VNNI, AVX-VNNI or AMX), which this one lacks: without it torch's int8 "
                "matmul runs at ~2 GMAC/s, 10-16x slower than the default; use auto, int4 or none"
            )
        if self.speculative_tokens < 0:
            raise ValueError(f"speculative_tokens must be >= 0, got {self.speculative_tokens}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
