// The native operators as C++ functions, for the ones that call others (decode_layers.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "block_format.h"

namespace astrai {

// out = prologue(x) @ weight.T (+ bias) (+ residual) over records of kFormat (block_format.h);
// int8: the activations rounded to 8 bits per block (int8_kernel.h), else float32.
template <Records kFormat>
at::Tensor block_linear(const at::Tensor& x, const at::Tensor& weight, int64_t out_features,
                        const c10::optional<at::Tensor>& bias,
                        const c10::optional<at::Tensor>& residual,
                        const c10::optional<at::Tensor>& norm_weight, double eps, bool gated,
                        int64_t panel_rows, bool int8);

at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& positions,
                            const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k_cache,
                            const at::Tensor& v_cache, const at::Tensor& write_slots,
                            const at::Tensor& read_slots, int64_t num_heads, int64_t num_kv_heads,
                            int64_t window);

// x (m, k) times a woven Q4_K or grouped Q6_K weight with 8-bit activations (AVX-512 VNNI).
at::Tensor kquant_gemv(const at::Tensor& x_in, const at::Tensor& weight, int64_t type,
                       int64_t out_features);

// The same on the tile unit (AMX-INT8; kquant_tiles.h), for the rows the probe chose.
at::Tensor kquant_tiles(const at::Tensor& x_in, const at::Tensor& weight, int64_t type,
                        int64_t out_features);

}  // namespace astrai
