"""The quantized forms a model's linear layers can take, named without importing torch."""

# "q4_1": layers as GGUF Q4_1 blocks and the output layer as Q8_0, in the native kernels.
QUANTIZATIONS = ("int8", "int4", "q4_1")
# "gguf": a GGUF file's tensors in their own codes (worker.model.gguf_model); not a packing.
WEIGHT_FORMS = ("gguf", *QUANTIZATIONS)
