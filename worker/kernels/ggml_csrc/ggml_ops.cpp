// GGUF weights in their own block codes, multiplied by ggml's CPU dot products.
//
// Why: ggml is the maintained reference implementation of every GGUF block format (Q4_0 ..
// Q8_0, the K-quants' super-blocks), with vector kernels for each x86 and Arm instruction set.
// These ops call its per-type traits (worker/kernels/ggml_build.py builds ggml's CPU backend
// from the llama-cpp-python sdist and links it in statically): the activations are quantized
// once per row into the type's partner format (Q8_0, Q8_1 or Q8_K, as llama.cpp does), then
// each output is one `vec_dot` over a weight row, so the weights are read as the file holds
// them and nothing is ever widened to float32.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace astrai_ggml {
namespace {

// Weight rows per work item: their bytes stay in L1/L2 while every activation row passes.
constexpr int64_t kRowBlock = 16;

void init_once() {
  static std::once_flag flag;
  std::call_once(flag, [] { ggml_cpu_init(); });
}

ggml_type checked_type(int64_t type) {
  TORCH_CHECK(type >= 0 && type < GGML_TYPE_COUNT, "unknown ggml type ", type);
  const auto t = static_cast<ggml_type>(type);
  TORCH_CHECK(ggml_get_type_traits(t)->blck_size > 0 && ggml_get_type_traits_cpu(t)->vec_dot,
              "ggml type ", ggml_type_name(t), " has no CPU dot product");
  return t;
}

void check_weight(const at::Tensor& w, ggml_type type, int64_t in_features) {
  TORCH_CHECK(w.dtype() == at::kByte && w.dim() == 2 && w.is_contiguous(),
              "weights must be contiguous uint8 (rows, row bytes)");
  TORCH_CHECK(in_features % ggml_blck_size(type) == 0, "in_features ", in_features,
              " is not a multiple of ", ggml_type_name(type), "'s block of ",
              ggml_blck_size(type));
  TORCH_CHECK(w.size(1) == static_cast<int64_t>(ggml_row_size(type, in_features)),
              "weight rows of ", w.size(1), " bytes, expected ", ggml_row_size(type, in_features),
              " for ", in_features, " ", ggml_type_name(type), " values");
}

// x (N, in) float32 → (N, row bytes) in `type`, one row per call of its from_float.
at::Tensor quantize_rows(const at::Tensor& x, ggml_type type) {
  const int64_t n = x.size(0), k = x.size(1);
  const int64_t bytes = static_cast<int64_t>(ggml_row_size(type, k));
  at::Tensor out = at::empty({n, bytes}, x.options().dtype(at::kByte));
  const auto from_float = ggml_get_type_traits_cpu(type)->from_float;
  TORCH_CHECK(from_float, "ggml type ", ggml_type_name(type), " has no CPU quantizer");
  const float* src = x.data_ptr<float>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) from_float(src + r * k, dst + r * bytes, k);
  });
  return out;
}

struct Part {
  const uint8_t* weight;
  ggml_type type;
  int64_t rows, row_bytes, column;  // column: where its outputs start in the result
  const uint8_t* input;             // the activations in the part's dot-product format
  int64_t input_bytes;
};

// out (N, total) = x (N, in) times each part's (rows, in) weights, side by side.
at::Tensor linear(const at::Tensor& x_in, const std::vector<at::Tensor>& weights,
                  at::IntArrayRef types, at::IntArrayRef out_features,
                  const std::optional<at::Tensor>& bias) {
  init_once();
  TORCH_CHECK(!weights.empty() && weights.size() == types.size() &&
                  weights.size() == out_features.size(),
              "one type and one out_features per weight");
  const at::Tensor x = x_in.to(at::kFloat).contiguous();
  TORCH_CHECK(x.dim() == 2, "x must be (N, in)");
  const int64_t n = x.size(0), k = x.size(1);
  std::vector<std::pair<ggml_type, at::Tensor>> inputs;  // one per dot-product format
  std::vector<Part> parts;
  int64_t total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const ggml_type type = checked_type(types[i]);
    check_weight(weights[i], type, k);
    TORCH_CHECK(weights[i].size(0) == out_features[i], "weight ", i, " has ", weights[i].size(0),
                " rows, expected ", out_features[i]);
    const ggml_type partner = ggml_get_type_traits_cpu(type)->vec_dot_type;
    auto found = std::find_if(inputs.begin(), inputs.end(),
                              [&](const auto& entry) { return entry.first == partner; });
    if (found == inputs.end()) {
      inputs.emplace_back(partner, quantize_rows(x, partner));
      found = inputs.end() - 1;
    }
    parts.push_back({weights[i].data_ptr<uint8_t>(), type, out_features[i], weights[i].size(1),
                     total, found->second.data_ptr<uint8_t>(), found->second.size(1)});
    total += out_features[i];
  }
  at::Tensor out = at::empty({n, total}, x.options());
  float* dst = out.data_ptr<float>();
  // Work items: blocks of kRowBlock weight rows of one part.
  std::vector<std::pair<int32_t, int64_t>> items;
  for (size_t p = 0; p < parts.size(); ++p)
    for (int64_t r = 0; r < parts[p].rows; r += kRowBlock) items.emplace_back(p, r);
  at::parallel_for(0, static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const Part& part = parts[items[item].first];
      const int64_t first = items[item].second;
      const int64_t last = std::min(part.rows, first + kRowBlock);
      const auto vec_dot = ggml_get_type_traits_cpu(part.type)->vec_dot;
      for (int64_t row = 0; row < n; ++row) {
        const uint8_t* a = part.input + row * part.input_bytes;
        float* o = dst + row * total + part.column;
        for (int64_t r = first; r < last; ++r)
          vec_dot(static_cast<int>(k), o + r, 0, part.weight + r * part.row_bytes, 0, a, 0, 1);
      }
    }
  });
  if (bias.has_value()) out.add_(bias->to(at::kFloat));
  return out;
}

// The float32 rows `ids` of a (rows, in) weight: an embedding lookup in the file's codes.
at::Tensor rows(const at::Tensor& weight, int64_t type_id, int64_t in_features,
                const at::Tensor& ids_in) {
  init_once();
  const auto type = static_cast<ggml_type>(type_id);
  TORCH_CHECK(type_id >= 0 && type_id < GGML_TYPE_COUNT && ggml_get_type_traits(type)->to_float,
              "ggml type ", type_id, " cannot be read as float");
  check_weight(weight, type, in_features);
  const at::Tensor ids = ids_in.to(at::kLong).contiguous().view(-1);
  const int64_t n = ids.size(0), row_bytes = weight.size(1), count = weight.size(0);
  at::Tensor out = at::empty({n, in_features}, weight.options().dtype(at::kFloat));
  const auto to_float = ggml_get_type_traits(type)->to_float;
  const int64_t* index = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(index[i] >= 0 && index[i] < count, "row ", index[i], " out of range ", count);
  const uint8_t* src = weight.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      to_float(src + index[i] * row_bytes, dst + i * in_features, in_features);
  });
  return out;
}

// (rows, in) float32 → (rows, row bytes) in `type`, with ggml's own quantizer (as
// llama-quantize without an importance matrix): for tests and for making files.
at::Tensor quantize(const at::Tensor& x_in, int64_t type_id) {
  init_once();
  const auto type = static_cast<ggml_type>(type_id);
  TORCH_CHECK(type_id >= 0 && type_id < GGML_TYPE_COUNT, "unknown ggml type ", type_id);
  const at::Tensor x = x_in.to(at::kFloat).contiguous();
  TORCH_CHECK(x.dim() == 2, "x must be (rows, in)");
  const int64_t n = x.size(0), k = x.size(1);
  TORCH_CHECK(k % ggml_blck_size(type) == 0, "in_features ", k, " is not a multiple of ",
              ggml_type_name(type), "'s block of ", ggml_blck_size(type));
  const int64_t bytes = static_cast<int64_t>(ggml_row_size(type, k));
  at::Tensor out = at::empty({n, bytes}, x.options().dtype(at::kByte));
  ggml_quantize_init(type);
  ggml_quantize_chunk(type, x.data_ptr<float>(), out.data_ptr<uint8_t>(), 0, n, k, nullptr);
  return out;
}

int64_t row_bytes(int64_t type_id, int64_t in_features) {
  TORCH_CHECK(type_id >= 0 && type_id < GGML_TYPE_COUNT, "unknown ggml type ", type_id);
  const auto type = static_cast<ggml_type>(type_id);
  TORCH_CHECK(ggml_blck_size(type) > 0 && in_features % ggml_blck_size(type) == 0,
              "in_features ", in_features, " does not fit ", ggml_type_name(type), "'s blocks");
  return static_cast<int64_t>(ggml_row_size(type, in_features));
}

// The vector instructions ggml's kernels were compiled with, widest first.
std::string isa() {
  if (ggml_cpu_has_avx512_vnni()) return "AVX-512 VNNI";
  if (ggml_cpu_has_avx512()) return "AVX-512";
  if (ggml_cpu_has_avx2()) return "AVX2";
  if (ggml_cpu_has_neon()) return "NEON";
  return "scalar";
}

}  // namespace

TORCH_LIBRARY(astrai_ggml, m) {
  m.def("linear(Tensor x, Tensor[] weights, int[] types, int[] out_features, Tensor? bias) -> Tensor");
  m.def("rows(Tensor weight, int type, int in_features, Tensor ids) -> Tensor");
  m.def("quantize(Tensor x, int type) -> Tensor");
  // No tensors: one kernel for every backend.
  m.def("row_bytes(int type, int in_features) -> int", &row_bytes);
  m.def("isa() -> str", &isa);
}

TORCH_LIBRARY_IMPL(astrai_ggml, CPU, m) {
  m.impl("linear", &linear);
  m.impl("rows", &rows);
  m.impl("quantize", &quantize);
}

}  // namespace astrai_ggml
