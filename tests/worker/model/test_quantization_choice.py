"""Which quantization a model gets: "auto" keeps a Q4_1 file's own codes, never loses anything."""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.worker.model_factory import hf_model, save_hf
from tests.worker.native import needs_native_kernels
from worker.kernels.build import kernel_isa
from worker.kernels.layout import pack_q4_1
from worker.model import precision
from worker.model.block_linear import BlockLinear
from worker.model.linear import PackedLinear
from worker.model.loader import load_model
from worker.model.model_dir import resolve_model_dir
from worker.model.precision import resolve_dtype, resolve_quantization

CPU = torch.device("cpu")
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def q4_1_folder(folder, skip_layer: int | None = None):
    """A tiny Llama whose linear weights lie on a Q4_1 grid, as a Q4_1 GGUF's do."""
    hf = hf_model("llama")
    with torch.no_grad():
        for name, param in hf.named_parameters():
            on_grid = name.endswith(".weight") and any(f".{x}." in name for x in LINEARS)
            if on_grid and f"layers.{skip_layer}." not in name:
                param.copy_(pack_q4_1(param).dequantized)
    return save_hf(hf, folder)


@needs_native_kernels
def test_auto_takes_q4_1_losslessly_for_weights_on_the_grid(tmp_path):
    folder = q4_1_folder(tmp_path)
    assert resolve_quantization("auto", folder, CPU) == ("q4_1", True)
    assert resolve_dtype("auto", CPU, "q4_1") == torch.float32
    reference = load_model(folder, torch.float32, CPU)
    model = load_model(folder, torch.float32, CPU, quantization="q4_1", exact_only=True)
    for ours, theirs in zip(model.layers, reference.layers, strict=True):
        assert isinstance(ours.mlp.down_proj, BlockLinear)
        assert torch.equal(
            ours.mlp.down_proj.records, pack_q4_1(theirs.mlp.down_proj.weight.t()).records
        )


@needs_native_kernels
def test_a_layer_off_the_grid_stays_float_under_auto(tmp_path):
    folder = q4_1_folder(tmp_path, skip_layer=1)
    model = load_model(folder, torch.float32, CPU, quantization="q4_1", exact_only=True)
    assert isinstance(model.layers[0].self_attn.qkv_proj, BlockLinear)
    assert isinstance(model.layers[1].self_attn.qkv_proj, PackedLinear)
    # The tiny model's head is random floats, not Q8_0 codes: it stays float32 too.
    assert isinstance(model._head, PackedLinear)


@needs_native_kernels
def test_auto_leaves_float_weights_float(tmp_path):
    folder = save_hf(hf_model("llama"), tmp_path)
    assert resolve_quantization("auto", folder, CPU) == (None, False)


def test_auto_is_none_off_the_cpu_and_without_the_kernels(tmp_path, monkeypatch):
    folder = q4_1_folder(tmp_path)
    assert resolve_quantization("auto", folder, torch.device("cuda")) == (None, False)
    monkeypatch.setattr(precision, "native_kernels_available", lambda: False)
    assert resolve_quantization("auto", folder, CPU) == (None, False)


def test_q4_1_without_the_kernels_is_refused_up_front(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "native_kernels_available", lambda: False)
    with pytest.raises(ValueError, match="q4_1 needs the native CPU kernels"):
        resolve_quantization("q4_1", tmp_path, CPU)


@pytest.mark.parametrize("requested", [None, "none"])
def test_none_means_float_weights(requested, tmp_path):
    assert resolve_quantization(requested, tmp_path, CPU) == (None, False)
    assert resolve_quantization("int4", tmp_path, CPU) == ("int4", False)


@pytest.mark.slow  # starts an InferenceEngine (its thread, a model load)
@needs_native_kernels
def test_the_engine_says_at_startup_what_this_cpu_got(tmp_path, caplog):
    import logging

    from worker.engine.inference_engine import InferenceEngine
    from worker.machine.cpu_info import kernel_flags

    folder = q4_1_folder(tmp_path)
    default = resolve_model_dir(None)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (default / name).is_file():
            shutil.copy(default / name, folder / name)
    with (
        caplog.at_level(logging.INFO, logger="worker.engine.inference_engine"),
        InferenceEngine(folder, kv_cache_mb=16) as engine,
    ):
        assert engine.quantization == "q4_1"
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("CPU ")]
    assert "the file's own Q4_1 codes" in line and "native kernels built for it" in line
    assert kernel_isa() in line
    assert "block panel kernel" in line and "float32 layers as" in line
    assert all(flag in line for flag in kernel_flags())
    assert "attention: contexts gathered" in line


@pytest.mark.parametrize(
    ("device", "option", "chosen"),
    [("cpu", "auto", "gather"), ("cuda", "auto", "flex"), ("cpu", "flex", "flex")],
)
def test_attention_reads_the_pages_in_place_on_cuda_by_default(device, option, chosen):
    from worker.engine.machine_choices import MachineChoices
    from worker.engine.options import EngineOptions

    options = EngineOptions(device=device, attention=option, quantization="none")
    choices = MachineChoices.resolve(options, resolve_model_dir(None))
    assert choices.attention == chosen
    assert ("flex_attention over the pages" in choices.describe()) == (chosen == "flex")


def test_flex_attention_with_the_compiled_step_is_refused_on_the_cpu_only():
    from worker.engine.options import EngineOptions

    with pytest.raises(ValueError, match="attention flex with compile is refused on the CPU"):
        EngineOptions(attention="flex", compile=True)
    EngineOptions(attention="flex", compile=True, device="cuda")
    EngineOptions(attention="flex")


def test_a_q8_0_cache_is_read_by_gather_attention_only():
    """flex_attention and the compiled step read float rows: asked for with q8_0, refused by
    name; on CUDA, auto then gathers the rows."""
    from worker.engine.machine_choices import MachineChoices
    from worker.engine.options import EngineOptions

    for asked in ({"attention": "flex"}, {"compile": True}):
        with pytest.raises(ValueError, match=r"kv_cache_dtype q8_0 .* neither attention flex"):
            EngineOptions(kv_cache_dtype="q8_0", **asked)  # type: ignore[arg-type]
    options = EngineOptions(device="cuda", kv_cache_dtype="q8_0", quantization="none")
    assert MachineChoices.resolve(options, resolve_model_dir(None)).attention == "gather"


@pytest.mark.parametrize(
    ("quantization", "precision", "int8"),
    [("auto", "file", True), ("auto", "exact", False), ("none", "file", False)],
)
def test_a_gguf_computes_as_ggml_does_unless_precision_is_exact(quantization, precision, int8):
    from worker.engine.machine_choices import MachineChoices
    from worker.engine.options import EngineOptions

    assert EngineOptions().precision == "file"
    options = EngineOptions(quantization=quantization, precision=precision)
    choices = MachineChoices.resolve(options, resolve_model_dir(None))  # the default Q4_1 file
    assert choices.int8_activations == int8
    line = choices.describe()
    if quantization == "auto":
        assert f"precision {precision}" in line
        assert ("8-bit activations" in line) == int8


def test_an_unknown_precision_is_refused_by_name():
    from worker.engine.options import EngineOptions

    with pytest.raises(ValueError, match="precision must be one of"):
        EngineOptions(precision="fp8")
