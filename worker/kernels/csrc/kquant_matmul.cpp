// K-quant weights (Q4_K woven by ggml, Q6_K as the file holds it) times float32 activations on
// the panel kernels, for many rows at a time.
//
// Why: ggml's own kernels for these types quantize the activations to 8 bits and multiply
// integers, which is what a decode step of one or a few rows wants (it is bound by reading
// the weights); from some rows on the work is bound by arithmetic, and the panel kernels,
// which unpack each block's codes once and reuse them over all rows (on the tile unit where
// the CPU has one), do more of it per cycle. The weights stay in the one copy ggml reads: the
// woven Q4_K bytes are read as they lie, so nothing is held twice. Which rows take which path
// is the probe's choice (worker/kernels/plan.py).

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstdint>
#include <string>

#include "kquant_activations.h"
#include "kquant_amx.h"
#include "kquant_format.h"
#include "kquant_gemv.h"
#include "kquant_q5k_woven.h"
#include "kquant_q6k_grouped.h"
#include "ops.h"
#include "panel_matmul.h"
#include "parallel.h"

namespace astrai {
namespace {

// ggml's type ids (ggml.h's enum ggml_type), as the GGUF file names them.
constexpr int64_t kGgmlQ4K = 12;
constexpr int64_t kGgmlQ5K = 13;
constexpr int64_t kGgmlQ6K = 14;

// x as float32 rows, once the type, x and the weight's shape are checked for `op` (the gemv,
// where `gemv`, also takes Q5_K); every woven weight and, where `gemv` is false, every Q6_K
// one in whole tiles.
at::Tensor checked_input(const char* op, const at::Tensor& x_in, const at::Tensor& weight,
                         int64_t type, int64_t n, bool gemv) {
  TORCH_CHECK(type == kGgmlQ4K || type == kGgmlQ6K || (gemv && type == kGgmlQ5K), op,
              " takes Q4_K (", kGgmlQ4K, ")", gemv ? ", Q5_K (13)" : "", " or Q6_K (", kGgmlQ6K,
              "), got type ", type);
  TORCH_CHECK(x_in.dim() == 2, "x must be (rows, in)");
  TORCH_CHECK(weight.scalar_type() == at::kByte && weight.dim() == 2 && weight.is_contiguous(),
              "weight must be a contiguous (rows, row bytes) uint8 tensor");
  const int64_t k = x_in.size(1);
  TORCH_CHECK(k % kSuperBlock == 0, "in_features ", k, " is not a multiple of ", kSuperBlock);
  const bool whole_tiles = type != kGgmlQ6K || !gemv;
  TORCH_CHECK(weight.size(0) == n && (!whole_tiles || n % kTile == 0), "weight has ",
              weight.size(0), " rows; out_features ", n, " must equal it",
              whole_tiles ? " and be a multiple of " : "",
              whole_tiles ? std::to_string(kTile) : "");
  const int64_t block_bytes = type == kGgmlQ4K   ? kQ4KWovenBytes / kTile
                              : type == kGgmlQ5K ? kQ5KBytes
                                                 : kQ6KBytes;
  TORCH_CHECK(weight.size(1) == k / kSuperBlock * block_bytes, "weight rows of ", weight.size(1),
              " bytes do not hold ", k, " inputs");
  return x_in.to(at::kFloat).contiguous();
}

at::Tensor kquant_linear(const at::Tensor& x_in, const at::Tensor& weight, int64_t type,
                         int64_t out_features) {
  const at::Tensor x = checked_input("kquant_linear", x_in, weight, type, out_features, false);
  const int64_t m = x.size(0), k = x.size(1), n = out_features;
  at::Tensor out = at::empty({m, n}, x.options());
  if (m == 0) return out;
#if defined(__AVX2__)
  const uint8_t* w = weight.data_ptr<uint8_t>();
  const int64_t tiles = n / kTile, blocks = k / kBlock, supers = k / kSuperBlock;
  if (type == kGgmlQ4K) {
    panel_matmul(Q4KWoven{w, supers}, x.data_ptr<float>(), m, tiles, blocks, out.data_ptr<float>());
  } else {
    panel_matmul(Q6KRows{w, supers}, x.data_ptr<float>(), m, tiles, blocks, out.data_ptr<float>());
  }
#else
  TORCH_CHECK(false, "kquant_linear needs AVX2 (see kquant_linear_available)");
#endif
  return out;
}

// A Q6_K weight as the file holds it (rows, row bytes) → the same bytes grouped for our
// kernels (kquant_q6k_grouped.h).
at::Tensor kquant_q6k_group(const at::Tensor& weight) {
  TORCH_CHECK(
      weight.scalar_type() == at::kByte && weight.dim() == 2 && weight.size(1) % kQ6KBytes == 0,
      "a Q6_K weight is a (rows, super-blocks x 210) uint8 tensor");
  const at::Tensor in = weight.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options());
#if defined(ASTRAI_KQUANT_GEMV)
  const int64_t blocks = in.numel() / kQ6KBytes;
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  parallel_chunks(blocks, 1024, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b)
      q6_k_group_super(src + b * kQ6KBytes, dst + b * kQ6KBytes);
  });
#else
  TORCH_CHECK(false, "kquant_q6k_group needs AVX2 (see kquant_gemv_available)");
#endif
  return out;
}

// A Q5_K weight as the file holds it (rows, row bytes), rows a multiple of 8 → the same bits
// woven for the gemv (kquant_q5k_woven.h), the same shape.
at::Tensor kquant_q5k_weave(const at::Tensor& weight) {
  TORCH_CHECK(weight.scalar_type() == at::kByte && weight.dim() == 2 &&
                  weight.size(1) % kQ5KBytes == 0 && weight.size(0) % kTile == 0,
              "a Q5_K weight to weave is a (rows, super-blocks x 176) uint8 tensor, rows a "
              "multiple of 8");
  const at::Tensor in = weight.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options());
  const int64_t supers = in.size(1) / kQ5KBytes;
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  parallel_chunks(in.size(0) / kTile, 16, [&](int64_t first, int64_t last) {
    for (int64_t g = first; g < last; ++g) q5_k_weave_group(src, supers, g, dst);
  });
  return out;
}

// Rows `ids` of a grouped Q6_K weight (a tied token embedding read from the output layer's
// one copy) as float32, each as dequantize_row_q6_K makes it.
at::Tensor kquant_q6k_grouped_rows(const at::Tensor& weight, const at::Tensor& ids_in,
                                   int64_t in_features) {
  TORCH_CHECK(weight.scalar_type() == at::kByte && weight.dim() == 2 && weight.is_contiguous() &&
                  in_features % kSuperBlock == 0 &&
                  weight.size(1) == in_features / kSuperBlock * kQ6KBytes,
              "a grouped Q6_K weight is a contiguous (rows, in_features / 256 x 210) uint8 tensor");
  const at::Tensor ids = ids_in.to(at::kLong).contiguous().view(-1);
  const int64_t n = ids.size(0), count = weight.size(0), supers = in_features / kSuperBlock;
  at::Tensor out = at::empty({n, in_features}, weight.options().dtype(at::kFloat));
  const int64_t* index = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    TORCH_CHECK(index[i] >= 0 && index[i] < count, "row ", index[i], " out of range ", count);
#if defined(ASTRAI_KQUANT_GEMV)
  const uint8_t* src = weight.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t s = 0; s < supers; ++s)
      q6_k_grouped_row(src + (index[i] * supers + s) * kQ6KBytes,
                       dst + i * in_features + s * kSuperBlock);
#else
  TORCH_CHECK(false, "kquant_q6k_grouped_rows needs AVX2 (see kquant_gemv_available)");
#endif
  return out;
}

// Whether kquant_gemv takes ggml type `type` here: Q4_K and Q5_K (woven) and Q6_K (grouped)
// from AVX2 on.
bool kquant_gemv_available(int64_t type) {
#if defined(ASTRAI_KQUANT_GEMV)
  return type == kGgmlQ4K || type == kGgmlQ5K || type == kGgmlQ6K;
#else
  return false;
#endif
}

// Whether the gemv runs its zmm form (AVX-512 VNNI) here rather than its ymm one.
bool kquant_gemv_zmm() {
#if defined(ASTRAI_KQUANT_GEMV_ZMM)
  return true;
#else
  return false;
#endif
}

// Whether this build has the kernels at all (AVX2 or wider).
bool kquant_linear_available() {
#if defined(__AVX2__)
  return true;
#else
  return false;
#endif
}

}  // namespace

// x (m, k) times a woven Q4_K weight (rows below the panels') or a grouped Q6_K one (every row
// count) in 8-bit integers (kquant_gemv.h).
at::Tensor kquant_gemv(const at::Tensor& x_in, const at::Tensor& weight, int64_t type,
                       int64_t out_features) {
  const at::Tensor x = checked_input("kquant_gemv", x_in, weight, type, out_features, true);
  TORCH_CHECK(kquant_gemv_available(type), "kquant_gemv takes no type ", type,
              " on this CPU (see kquant_gemv_available)");
  const int64_t m = x.size(0), k = x.size(1), n = out_features;
  at::Tensor out = at::empty({m, n}, x.options());
  if (m == 0) return out;
#if defined(ASTRAI_KQUANT_GEMV)
  const QuantizedActivations activations(x, m);
  const QuantizedRows rows = activations.rows();
  // Q6_K's codes also in its grouped order (kquant_q6k_grouped.h).
  const bool woven = type != kGgmlQ6K;
  at::Tensor grouped = at::empty({woven ? 0 : m, k}, activations.codes.options());
  if (!woven) {
    parallel_chunks(m, 4, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r)
        group_row_codes(rows.row_codes(r), k, grouped.data_ptr<int8_t>() + r * k);
    });
  }
  const uint8_t* w = weight.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  const int64_t supers = k / kSuperBlock;
  if (woven) {
    parallel_chunks(n / kTile, chunk_for(n / kTile, 8, 32), [&](int64_t first, int64_t last) {
      if (type == kGgmlQ5K) {
        woven_gemv_groups<true>(w, supers, rows, m, first, last, dst, n);
      } else {
        woven_gemv_groups<false>(w, supers, rows, m, first, last, dst, n);
      }
    });
  } else {
    parallel_chunks(n, chunk_for(n, 32, 256), [&](int64_t first, int64_t last) {
      q6_k_grouped_gemv(w, supers, rows, grouped.data_ptr<int8_t>(), m, first, last, dst, n);
    });
  }
#endif
  return out;
}

// x (rows, in) float32 times a Q4_K weight woven by ggml's repack (astrai_ggml::interleave),
// a Q6_K one (kquant_linear: as the file holds it; kquant_gemv: grouped by kquant_q6k_group)
// or, on the gemv only, a Q5_K one woven by kquant_q5k_weave; (out, row bytes) uint8 →
// (rows, out) float32.
TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def("kquant_linear(Tensor x, Tensor weight, int type, int out_features) -> Tensor");
  m.def("kquant_linear_available() -> bool", &kquant_linear_available);
  m.def("kquant_gemv(Tensor x, Tensor weight, int type, int out_features) -> Tensor");
  m.def("kquant_gemv_available(int type) -> bool", &kquant_gemv_available);
  m.def("kquant_gemv_zmm() -> bool", &kquant_gemv_zmm);
  m.def("kquant_q6k_group(Tensor weight) -> Tensor");
  m.def("kquant_q5k_weave(Tensor weight) -> Tensor");
  m.def("kquant_q6k_grouped_rows(Tensor weight, Tensor ids, int in_features) -> Tensor");
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) {
  m.impl("kquant_linear", &kquant_linear);
  m.impl("kquant_gemv", &kquant_gemv);
  m.impl("kquant_q6k_group", &kquant_q6k_group);
  m.impl("kquant_q5k_weave", &kquant_q5k_weave);
  m.impl("kquant_q6k_grouped_rows", &kquant_q6k_grouped_rows);
}

}  // namespace astrai
