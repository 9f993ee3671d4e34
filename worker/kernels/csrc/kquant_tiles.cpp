// The op of kquant_tiles.h: a K-quant weight laid out for the gemv (Q4_K and Q5_K woven, Q6_K
// grouped) times many rows on the tile unit, in the 8-bit gemv's arithmetic (kquant_gemv.h),
// for the rows from which the probe finds it the faster (worker/kernels/kquant_probe.py).

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstdint>

#include "kquant_activations.h"
#include "kquant_tiles_q6k.h"
#include "kquant_tiles_woven.h"
#include "ops.h"
#include "parallel.h"

namespace astrai {
namespace {

constexpr int64_t kGgmlQ4K = 12;
constexpr int64_t kGgmlQ5K = 13;
constexpr int64_t kGgmlQ6K = 14;

// Whether this build has the kernel and Linux lets this process use the tiles.
bool kquant_tiles_available() {
#if defined(ASTRAI_KQUANT_TILES)
  return amx_ready();
#else
  return false;
#endif
}

}  // namespace

at::Tensor kquant_tiles(const at::Tensor& x_in, const at::Tensor& weight, int64_t type,
                        int64_t out_features) {
  TORCH_CHECK(kquant_tiles_available(), "kquant_tiles needs AMX-INT8 (see kquant_tiles_available)");
  TORCH_CHECK(type == kGgmlQ4K || type == kGgmlQ5K || type == kGgmlQ6K,
              "kquant_tiles takes woven Q4_K (12), woven Q5_K (13) or grouped Q6_K (14), got "
              "type ",
              type);
  TORCH_CHECK(x_in.dim() == 2 && x_in.size(1) % 256 == 0,
              "x must be (rows, in), in a multiple of 256");
  const int64_t m = x_in.size(0), k = x_in.size(1), n = out_features;
#if defined(ASTRAI_KQUANT_TILES)
  const int64_t bytes = type == kGgmlQ4K   ? kQ4KWovenBytes / kTile
                        : type == kGgmlQ5K ? kQ5KBytes
                                           : kQ6KBytes;
  TORCH_CHECK(weight.scalar_type() == at::kByte && weight.dim() == 2 && weight.is_contiguous() &&
                  weight.size(0) == n && n % kTileColumns == 0 &&
                  weight.size(1) == k / kSuperBlock * bytes,
              "weight must be a contiguous (out_features, row bytes) uint8 tensor laid out for the "
              "gemv, "
              "out_features a multiple of 16");
  const at::Tensor x = x_in.to(at::kFloat).contiguous();
  at::Tensor out = at::empty({m, n}, x.options());
  if (m == 0) return out;
  // Rows past m as zero codes: the tiles read whole 16-row tiles, their sums go nowhere.
  const int64_t row_tiles = (m + kTileRowsInt8 - 1) / kTileRowsInt8;
  const QuantizedActivations activations(x, row_tiles * kTileRowsInt8);
  const QuantizedRows rows = activations.rows();
  const at::Tensor tiled_codes =
      at::empty({row_tiles * kTileRowsInt8, k}, activations.codes.options());
  const TiledCodes codes{tiled_codes.data_ptr<int8_t>(), k / kSuperBlock};
  const bool q6k = type == kGgmlQ6K;
  parallel_chunks(row_tiles * codes.supers, 8,
                  [&](int64_t first, int64_t last) { codes.fill(rows, first, last, q6k); });
  at::Tensor row_scales;
  if (q6k) {
    row_scales = at::zeros({k / kSuperBlock, row_tiles * kTileRowsInt8}, x.options());
    row_scales.narrow(1, 0, m).copy_(activations.scales.t());
  }
  const uint8_t* w = weight.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  const int64_t supers = k / kSuperBlock, tiles = n / kTileColumns;
  parallel_chunks(tiles, chunk_for(tiles, kColumnTiles, 16), [&](int64_t first, int64_t last) {
    if (type == kGgmlQ4K) {
      tiles_matmul<WovenTiles<false>>(w, supers, rows, codes, m, first, last, dst, n);
    } else if (type == kGgmlQ5K) {
      tiles_matmul<WovenTiles<true>>(w, supers, rows, codes, m, first, last, dst, n);
    } else {
      q6k_tiles_matmul(w, supers, codes, row_scales.data_ptr<float>(), m, first, last, dst, n);
    }
  });
  return out;
#else
  return at::empty({m, n}, x_in.options().dtype(at::kFloat));
#endif
}

// x (rows, in) float32 times a woven Q4_K (astrai_ggml::interleave) or Q5_K
// (kquant_q5k_weave) or a grouped Q6_K (kquant_q6k_group) weight (out, row bytes) uint8 →
// (rows, out) float32.
TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def("kquant_tiles(Tensor x, Tensor weight, int type, int out_features) -> Tensor");
  m.def("kquant_tiles_available() -> bool", &kquant_tiles_available);
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) { m.impl("kquant_tiles", &kquant_tiles); }

}  // namespace astrai
