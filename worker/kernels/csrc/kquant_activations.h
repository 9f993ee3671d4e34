// The activation rows of the 8-bit K-quant kernels (the gemv, kquant_gemv.h; the tiles,
// kquant_tiles.h) as tensors, quantized once per matmul.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <cstdint>

#include "kquant_gemv.h"
#include "parallel.h"

#if defined(ASTRAI_KQUANT_GEMV)
namespace astrai {

// x's rows rounded to 8 bits per 256 inputs (quantize_row_q8), with their scales and sums;
// the codes of rows m .. padded zero (the tiles read whole 16-row tiles).
struct QuantizedActivations {
  at::Tensor codes, scales, sums, pair_sums;

  QuantizedActivations(const at::Tensor& x, int64_t padded) {
    const int64_t m = x.size(0), k = x.size(1);
    const auto bytes = x.options().dtype(at::kChar), ints = x.options().dtype(at::kInt);
    codes = padded > m ? at::zeros({padded, k}, bytes) : at::empty({m, k}, bytes);
    scales = at::empty({m, k / kSuperBlock}, x.options());
    sums = at::empty({m, k / 16}, ints);
    pair_sums = at::empty({m, k / 64}, ints);
    const float* in = x.data_ptr<float>();
    parallel_chunks(m, 4, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r)
        quantize_row_q8(in + r * k, k, codes.data_ptr<int8_t>() + r * k,
                        scales.data_ptr<float>() + r * (k / kSuperBlock),
                        sums.data_ptr<int32_t>() + r * (k / 16),
                        pair_sums.data_ptr<int32_t>() + r * (k / 64));
    });
  }

  QuantizedRows rows() const {
    return {codes.data_ptr<int8_t>(), scales.data_ptr<float>(), sums.data_ptr<int32_t>(),
            pair_sums.data_ptr<int32_t>(), codes.size(1)};
  }
};

}  // namespace astrai
#endif
