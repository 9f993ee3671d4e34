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
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

// ggml's interleaved kernels (ggml-cpu/repack.h, not an installed header): eight weight rows
// woven block by block, multiplied by one (gemv) or four (gemm) activation rows at a time.
extern "C" {
void ggml_quantize_mat_q8_0_4x8(const float* x, void* vy, int64_t k);
void ggml_quantize_mat_q8_K_4x8(const float* x, void* vy, int64_t k);
#define ASTRAI_GGML_KERNEL(name) \
  void name(int n, float* s, size_t bs, const void* vx, const void* vy, int nr, int nc);
ASTRAI_GGML_KERNEL(ggml_gemv_q4_0_8x8_q8_0)
ASTRAI_GGML_KERNEL(ggml_gemm_q4_0_8x8_q8_0)
ASTRAI_GGML_KERNEL(ggml_gemv_q4_K_8x8_q8_K)
ASTRAI_GGML_KERNEL(ggml_gemm_q4_K_8x8_q8_K)
ASTRAI_GGML_KERNEL(ggml_gemv_q2_K_8x8_q8_K)
ASTRAI_GGML_KERNEL(ggml_gemm_q2_K_8x8_q8_K)
ASTRAI_GGML_KERNEL(ggml_gemv_iq4_nl_8x8_q8_0)
ASTRAI_GGML_KERNEL(ggml_gemm_iq4_nl_8x8_q8_0)
#undef ASTRAI_GGML_KERNEL
}

namespace astrai_ggml {
namespace {

// Rows per work item of a plain (not woven) weight.
constexpr int64_t kRowBlock = 16;

// ggml's own messages at warning level and above, on stderr (its repack logs every tensor).
void log_warnings(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

void init_once() {
  static std::once_flag flag;
  std::call_once(flag, [] {
    ggml_log_set(log_warnings, nullptr);
    ggml_cpu_init();
  });
}

using QuantizeFour = void (*)(const float*, void*, int64_t);
using Kernel = void (*)(int, float*, size_t, const void*, const void*, int, int);

// The interleaved layout ggml's CPU backend picks on this CPU for a type ("repack"), as its
// ggml_repack_get_optimal_repack_type does on x86; nullptr where it keeps rows as they are.
struct Interleaved {
  QuantizeFour quantize_four;  // four activation rows into the woven partner format
  Kernel gemv, gemm;
};

const Interleaved* interleaved_for(ggml_type type) {
#if defined(__x86_64__)
  static const Interleaved q4_0{ggml_quantize_mat_q8_0_4x8, ggml_gemv_q4_0_8x8_q8_0,
                                ggml_gemm_q4_0_8x8_q8_0};
  static const Interleaved q4_k{ggml_quantize_mat_q8_K_4x8, ggml_gemv_q4_K_8x8_q8_K,
                                ggml_gemm_q4_K_8x8_q8_K};
  static const Interleaved q2_k{ggml_quantize_mat_q8_K_4x8, ggml_gemv_q2_K_8x8_q8_K,
                                ggml_gemm_q2_K_8x8_q8_K};
  static const Interleaved iq4_nl{ggml_quantize_mat_q8_0_4x8, ggml_gemv_iq4_nl_8x8_q8_0,
                                  ggml_gemm_iq4_nl_8x8_q8_0};
  if (type == GGML_TYPE_Q4_0 && ggml_cpu_has_avx2()) return &q4_0;
  if (type == GGML_TYPE_Q4_K && ggml_cpu_has_avx2()) return &q4_k;
  if (type == GGML_TYPE_IQ4_NL && ggml_cpu_has_avx2()) return &iq4_nl;
  if (type == GGML_TYPE_Q2_K && ggml_cpu_has_avx512()) return &q2_k;
#endif
  (void)type;
  return nullptr;
}

constexpr int64_t kWoven = 8;  // weight rows per interleaved group

// ggml's CPU_REPACK buffer type, which weaves a tensor's rows as its data is set.
ggml_backend_buffer_type_t repack_buffer_type() {
  static ggml_backend_buffer_type_t found = [] {
    ggml_backend_reg_t reg = ggml_backend_cpu_reg();
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    auto extra = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
    for (ggml_backend_buffer_type_t* t = extra ? extra(dev) : nullptr; t && *t; ++t)
      if (std::string(ggml_backend_buft_name(*t)) == "CPU_REPACK") return *t;
    return static_cast<ggml_backend_buffer_type_t>(nullptr);
  }();
  return found;
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
              " is not a multiple of ", ggml_type_name(type), "'s block of ", ggml_blck_size(type));
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

// x (N, in) → the partner format with rows 0..N-N%4 woven four at a time by
// `quantize_four` and the rest row by row, as ggml's interleaved gemm and gemv read them.
at::Tensor quantize_woven(const at::Tensor& x, ggml_type partner, QuantizeFour quantize_four) {
  const int64_t n = x.size(0), k = x.size(1);
  const int64_t bytes = static_cast<int64_t>(ggml_row_size(partner, k));
  at::Tensor out = at::empty({n, bytes}, x.options().dtype(at::kByte));
  const auto from_float = ggml_get_type_traits_cpu(partner)->from_float;
  const float* src = x.data_ptr<float>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const int64_t fours = n / 4;
  at::parallel_for(0, fours + (n - 4 * fours), 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      if (item < fours) {
        quantize_four(src + 4 * item * k, dst + 4 * item * bytes, k);
      } else {
        const int64_t row = 4 * fours + (item - fours);
        from_float(src + row * k, dst + row * bytes, k);
      }
    }
  });
  return out;
}

struct Part {
  const uint8_t* weight;
  ggml_type type;
  int64_t rows, row_bytes, column;  // column: where its outputs start in the result
  const uint8_t* input;             // the activations in the part's dot-product format
  int64_t input_bytes;
  const Interleaved* woven;  // its rows interleaved for ggml's gemv/gemm, or nullptr
};

// Weight rows per work item: a block's bytes stay in L1/L2 while every activation row passes.
int64_t rows_per_item(const Part& part) { return part.woven ? 8 * kWoven : kRowBlock; }

void multiply(const Part& part, int64_t first, int64_t last, int64_t n, int64_t k, int64_t total,
              float* dst) {
  if (part.woven != nullptr) {
    const uint8_t* w = part.weight + first * part.row_bytes;
    const int cols = static_cast<int>(last - first);
    const int64_t grouped = n - n % 4;
    float* out = dst + part.column + first;
    if (grouped > 0)
      part.woven->gemm(static_cast<int>(k), out, total, w, part.input, grouped, cols);
    for (int64_t row = grouped; row < n; ++row)
      part.woven->gemv(static_cast<int>(k), out + row * total, total, w,
                       part.input + row * part.input_bytes, 1, cols);
    return;
  }
  const auto vec_dot = ggml_get_type_traits_cpu(part.type)->vec_dot;
  for (int64_t row = 0; row < n; ++row) {
    const uint8_t* a = part.input + row * part.input_bytes;
    float* o = dst + row * total + part.column;
    for (int64_t r = first; r < last; ++r)
      vec_dot(static_cast<int>(k), o + r, 0, part.weight + r * part.row_bytes, 0, a, 0, 1);
  }
}

// out (N, total) = x (N, in) times each part's (rows, in) weights, side by side; a part
// marked woven holds rows interleave() made.
at::Tensor linear(const at::Tensor& x_in, const std::vector<at::Tensor>& weights,
                  at::IntArrayRef types, at::IntArrayRef out_features, at::IntArrayRef woven,
                  const std::optional<at::Tensor>& bias) {
  init_once();
  TORCH_CHECK(!weights.empty() && weights.size() == types.size() &&
                  weights.size() == out_features.size() && weights.size() == woven.size(),
              "one type, one out_features and one woven flag per weight");
  const at::Tensor x = x_in.to(at::kFloat).contiguous();
  TORCH_CHECK(x.dim() == 2, "x must be (N, in)");
  const int64_t n = x.size(0), k = x.size(1);
  // The activations once per dot-product format (and per woven layout of it).
  std::vector<std::pair<std::pair<ggml_type, QuantizeFour>, at::Tensor>> inputs;
  std::vector<Part> parts;
  int64_t total = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const ggml_type type = checked_type(types[i]);
    check_weight(weights[i], type, k);
    TORCH_CHECK(weights[i].size(0) == out_features[i], "weight ", i, " has ", weights[i].size(0),
                " rows, expected ", out_features[i]);
    const Interleaved* layout = woven[i] ? interleaved_for(type) : nullptr;
    TORCH_CHECK(!woven[i] || (layout && out_features[i] % kWoven == 0), "weight ", i,
                " is marked woven, but ", ggml_type_name(type), " has no interleaved kernel here");
    const ggml_type partner = ggml_get_type_traits_cpu(type)->vec_dot_type;
    const std::pair<ggml_type, QuantizeFour> key{partner, layout ? layout->quantize_four : nullptr};
    auto found = std::find_if(inputs.begin(), inputs.end(),
                              [&](const auto& entry) { return entry.first == key; });
    if (found == inputs.end()) {
      inputs.emplace_back(key, layout ? quantize_woven(x, partner, layout->quantize_four)
                                      : quantize_rows(x, partner));
      found = inputs.end() - 1;
    }
    parts.push_back({weights[i].data_ptr<uint8_t>(), type, out_features[i], weights[i].size(1),
                     total, found->second.data_ptr<uint8_t>(), found->second.size(1), layout});
    total += out_features[i];
  }
  at::Tensor out = at::empty({n, total}, x.options());
  float* dst = out.data_ptr<float>();
  std::vector<std::pair<int32_t, int64_t>> items;  // (part, first row) of each work item
  for (size_t p = 0; p < parts.size(); ++p)
    for (int64_t r = 0; r < parts[p].rows; r += rows_per_item(parts[p])) items.emplace_back(p, r);
  at::parallel_for(0, static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const Part& part = parts[items[item].first];
      const int64_t first = items[item].second;
      multiply(part, first, std::min(part.rows, first + rows_per_item(part)), n, k, total, dst);
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

bool can_interleave(int64_t type_id, int64_t rows) {
  init_once();
  return type_id >= 0 && type_id < GGML_TYPE_COUNT &&
         interleaved_for(static_cast<ggml_type>(type_id)) != nullptr && rows % kWoven == 0 &&
         repack_buffer_type() != nullptr;
}

// The weights woven as ggml's CPU backend weaves them for its interleaved kernels: the same
// bytes, reordered by ggml's own repack code through its CPU_REPACK buffer type.
at::Tensor interleave(const at::Tensor& weight, int64_t type_id, int64_t in_features) {
  init_once();
  const auto type = static_cast<ggml_type>(type_id);
  TORCH_CHECK(can_interleave(type_id, weight.size(0)), "ggml type ", type_id, " with ",
              weight.size(0), " rows has no interleaved kernel here");
  check_weight(weight, type, in_features);
  ggml_init_params params{ggml_tensor_overhead() * 2, nullptr, true};
  ggml_context* ctx = ggml_init(params);
  ggml_tensor* tensor = ggml_new_tensor_2d(ctx, type, in_features, weight.size(0));
  ggml_backend_buffer_t buffer =
      ggml_backend_buft_alloc_buffer(repack_buffer_type(), ggml_nbytes(tensor));
  at::Tensor out;
  if (buffer != nullptr &&
      ggml_backend_tensor_alloc(buffer, tensor, ggml_backend_buffer_get_base(buffer)) ==
          GGML_STATUS_SUCCESS &&
      tensor->extra != nullptr) {
    ggml_backend_tensor_set(tensor, weight.data_ptr<uint8_t>(), 0, ggml_nbytes(tensor));
    out = at::empty(weight.sizes(), weight.options());
    std::memcpy(out.data_ptr<uint8_t>(), tensor->data, ggml_nbytes(tensor));
  }
  if (buffer != nullptr) ggml_backend_buffer_free(buffer);
  ggml_free(ctx);
  TORCH_CHECK(out.defined(), "ggml's CPU backend did not interleave this ", ggml_type_name(type),
              " tensor");
  return out;
}

int64_t row_bytes(int64_t type_id, int64_t in_features) {
  TORCH_CHECK(type_id >= 0 && type_id < GGML_TYPE_COUNT, "unknown ggml type ", type_id);
  const auto type = static_cast<ggml_type>(type_id);
  TORCH_CHECK(ggml_blck_size(type) > 0 && in_features % ggml_blck_size(type) == 0, "in_features ",
              in_features, " does not fit ", ggml_type_name(type), "'s blocks");
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
  m.def(
      "linear(Tensor x, Tensor[] weights, int[] types, int[] out_features, int[] woven, "
      "Tensor? bias) -> Tensor");
  m.def("interleave(Tensor weight, int type, int in_features) -> Tensor");
  m.def("rows(Tensor weight, int type, int in_features, Tensor ids) -> Tensor");
  m.def("quantize(Tensor x, int type) -> Tensor");
  // No tensors: one kernel for every backend.
  m.def("row_bytes(int type, int in_features) -> int", &row_bytes);
  m.def("can_interleave(int type, int rows) -> bool", &can_interleave);
  m.def("isa() -> str", &isa);
}

TORCH_LIBRARY_IMPL(astrai_ggml, CPU, m) {
  m.impl("linear", &linear);
  m.impl("rows", &rows);
  m.impl("quantize", &quantize);
  m.impl("interleave", &interleave);
}

}  // namespace astrai_ggml
