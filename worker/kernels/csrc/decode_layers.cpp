// Every decoder layer of a decode step in one call: for each layer, RMSNorm + qkv, attention,
// o + residual, RMSNorm + gate/up, SwiGLU + down + residual, whatever kernel each weight takes.
//
// Why: at one decoding row, the 150 calls a step makes from Python (five per layer) cost
// about 1.5 ms of interpreter and dispatch time on a 2-core AVX2 EPYC, a tenth of the step;
// a GGUF whose layers take ggml's kernels (the K-quants) paid more, with the norms,
// gates and residual adds as separate torch ops. The arithmetic is the per-layer operators',
// called directly: our block kernels for Q4_1 / Q8_0 / Q5_0 / Q5_1 records (norm, gate and
// residual fused), ggml's dot products (astrai_ggml::linear, through the dispatcher: it lives
// in the other library) and our K-quant gemv for the rest.

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "activations.h"
#include "gil.h"
#include "ops.h"

namespace astrai {
namespace {

using OptionalTensors = c10::List<c10::optional<at::Tensor>>;

// What computes one weight (a part of a linear layer), as worker/model/native_decode.py
// describes it: five integers per part.
// Records kinds with 8-bit activations are the same records computed by int8_kernel.h.
enum class PartKind : int64_t {
  kQ4_1Records = 0,
  kQ8_0Records = 1,
  kGgml = 2,
  kKquantGemv = 3,
  kQ4_1RecordsInt8 = 4,
  kQ8_0RecordsInt8 = 5,
  kQ5_0RecordsInt8 = 6,
  kQ5_1RecordsInt8 = 7,
};
// Per part: linear index, kind, ggml type, out_features, and for a ggml part whether it is
// woven, for a gemv part the rows from which the tile unit takes it (0: never).
constexpr int64_t kPartFields = 5;
constexpr int kLinearsPerLayer = 4;  // qkv, o, gate_up, down

struct Part {
  at::Tensor weight;
  PartKind kind;
  int64_t type, out_features, woven;
  int64_t tiles_from() const { return woven; }  // a gemv part's fifth field
};

using Linear = std::vector<Part>;

bool is_records(PartKind kind) {
  return kind == PartKind::kQ4_1Records || kind == PartKind::kQ8_0Records ||
         kind == PartKind::kQ4_1RecordsInt8 || kind == PartKind::kQ8_0RecordsInt8 ||
         kind == PartKind::kQ5_0RecordsInt8 || kind == PartKind::kQ5_1RecordsInt8;
}

std::vector<Linear> read_linears(at::TensorList weights, at::IntArrayRef fields, size_t count) {
  TORCH_CHECK(
      static_cast<int64_t>(fields.size()) == kPartFields * static_cast<int64_t>(weights.size()),
      "parts must hold ", kPartFields, " integers per weight");
  std::vector<Linear> linears(count);
  int64_t last = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t* f = fields.data() + kPartFields * i;
    TORCH_CHECK(f[0] >= last && f[0] < static_cast<int64_t>(count), "part ", i, " names linear ",
                f[0], ": parts must come in the linears' order");
    TORCH_CHECK(f[1] >= 0 && f[1] <= 7, "part ", i, " has unknown kind ", f[1]);
    last = f[0];
    linears[f[0]].push_back({weights[i], static_cast<PartKind>(f[1]), f[2], f[3], f[4]});
  }
  for (size_t l = 0; l < count; ++l) {
    const Linear& linear = linears[l];
    TORCH_CHECK(!linear.empty(), "linear ", l, " has no weights");
    const bool records = is_records(linear[0].kind);
    TORCH_CHECK(!records || linear.size() == 1, "linear ", l, " in records must be one part");
  }
  return linears;
}

// The activations a linear reads: [silu(gate) * up], then [RMSNorm], as the block kernels
// prepare theirs (activations.h); the rows live in this thread's scratch until its next use.
at::Tensor prologue(const at::Tensor& x, const at::Tensor& norm, double eps, bool gated) {
  if (!gated && !norm.defined()) return x;
  const int64_t m = x.size(0), k = gated ? x.size(1) / 2 : x.size(1);
  const Prologue pro{gated, norm.defined() ? norm.data_ptr<float>() : nullptr,
                     static_cast<float>(eps)};
  const Rows rows = prepare_rows(x.data_ptr<float>(), m, k, false, pro, false);
  return at::from_blob(rows.x, {m, k}, x.options());
}

at::Tensor ggml_linear(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                       const std::vector<int64_t>& types, const std::vector<int64_t>& rows,
                       const std::vector<int64_t>& woven) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("astrai_ggml::linear", "")
          .typed<at::Tensor(const at::Tensor&, const std::vector<at::Tensor>&, at::IntArrayRef,
                            at::IntArrayRef, at::IntArrayRef, const std::optional<at::Tensor>&)>();
  return op.call(x, weights, types, rows, woven, std::nullopt);
}

// residual + linear(prologue(x)) + bias.
at::Tensor apply(const Linear& linear, const at::Tensor& x, const c10::optional<at::Tensor>& bias,
                 const c10::optional<at::Tensor>& residual, const at::Tensor& norm, double eps,
                 bool gated, int64_t panel_rows) {
  const Part& first = linear[0];
  const c10::optional<at::Tensor> norm_weight =
      norm.defined() ? c10::optional<at::Tensor>(norm) : c10::nullopt;
  const bool int8 =
      first.kind == PartKind::kQ4_1RecordsInt8 || first.kind == PartKind::kQ8_0RecordsInt8 ||
      first.kind == PartKind::kQ5_0RecordsInt8 || first.kind == PartKind::kQ5_1RecordsInt8;
  auto records = [&](auto format) {
    return block_linear<decltype(format)::value>(x, first.weight, first.out_features, bias,
                                                 residual, norm_weight, eps, gated, panel_rows,
                                                 int8);
  };
  if (first.kind == PartKind::kQ4_1Records || first.kind == PartKind::kQ4_1RecordsInt8)
    return records(std::integral_constant<Records, Records::kQ4_1>{});
  if (first.kind == PartKind::kQ8_0Records || first.kind == PartKind::kQ8_0RecordsInt8)
    return records(std::integral_constant<Records, Records::kQ8_0>{});
  if (first.kind == PartKind::kQ5_0RecordsInt8)
    return records(std::integral_constant<Records, Records::kQ5_0>{});
  if (first.kind == PartKind::kQ5_1RecordsInt8)
    return records(std::integral_constant<Records, Records::kQ5_1>{});
  const at::Tensor in = prologue(x, norm, eps, gated);
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < linear.size();) {
    if (linear[i].kind == PartKind::kKquantGemv) {
      const Part& part = linear[i];
      const bool tiles = part.tiles_from() > 0 && in.size(0) >= part.tiles_from();
      outs.push_back(tiles ? kquant_tiles(in, part.weight, part.type, part.out_features)
                           : kquant_gemv(in, part.weight, part.type, part.out_features));
      ++i;
      continue;
    }
    std::vector<at::Tensor> weights;
    std::vector<int64_t> types, rows, woven;
    for (; i < linear.size() && linear[i].kind == PartKind::kGgml; ++i) {
      weights.push_back(linear[i].weight);
      types.push_back(linear[i].type);
      rows.push_back(linear[i].out_features);
      woven.push_back(linear[i].woven);
    }
    TORCH_CHECK(!weights.empty(), "a records part among others in one linear");
    outs.push_back(ggml_linear(in, weights, types, rows, woven));
  }
  at::Tensor out = outs.size() == 1 ? outs[0] : at::cat(outs, 1);
  if (bias.has_value()) out.add_(*bias);
  if (residual.has_value()) out.add_(*residual);
  return out;
}

at::Tensor decode_layers(const at::Tensor& x, at::TensorList weights, at::IntArrayRef parts,
                         at::TensorList input_norm, at::TensorList post_norm,
                         const OptionalTensors& biases, at::TensorList k_caches,
                         at::TensorList v_caches, const at::Tensor& positions,
                         const at::Tensor& cos, const at::Tensor& sin,
                         const at::Tensor& write_slots, const at::Tensor& read_slots,
                         int64_t num_heads, int64_t num_kv_heads, int64_t window, double eps,
                         int64_t panel_rows) {
  const size_t layers = input_norm.size();
  TORCH_CHECK(post_norm.size() == layers && k_caches.size() == layers &&
                  v_caches.size() == layers && biases.size() == kLinearsPerLayer * layers,
              "every per-layer list needs one entry per layer (biases: ", kLinearsPerLayer, ")");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "x must be (rows, hidden) float32");
  const std::vector<Linear> linears = read_linears(weights, parts, kLinearsPerLayer * layers);
  const ReleasedGil released;
  at::Tensor h = x.contiguous();
  const at::Tensor none;
  for (size_t l = 0; l < layers; ++l) {
    const Linear* linear = &linears[kLinearsPerLayer * l];
    auto bias = [&](int i) { return biases.get(kLinearsPerLayer * l + i); };
    const at::Tensor q =
        apply(linear[0], h, bias(0), c10::nullopt, input_norm[l], eps, false, panel_rows);
    const at::Tensor heads =
        decode_attention(q, positions, cos, sin, k_caches[l], v_caches[l], write_slots, read_slots,
                         num_heads, num_kv_heads, window);
    h = apply(linear[1], heads, bias(1), h, none, 0.0, false, panel_rows);
    const at::Tensor gu =
        apply(linear[2], h, bias(2), c10::nullopt, post_norm[l], eps, false, panel_rows);
    h = apply(linear[3], gu, bias(3), h, none, 0.0, true, panel_rows);
  }
  return h;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def(
      "decode_layers(Tensor x, Tensor[] weights, int[] parts, Tensor[] input_norm, "
      "Tensor[] post_norm, Tensor?[] biases, Tensor(a!)[] k_caches, Tensor(b!)[] v_caches, "
      "Tensor positions, Tensor cos, Tensor sin, Tensor write_slots, Tensor read_slots, "
      "int num_heads, int num_kv_heads, int window, float eps, int panel_rows) -> Tensor");
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) { m.impl("decode_layers", &decode_layers); }

}  // namespace astrai
