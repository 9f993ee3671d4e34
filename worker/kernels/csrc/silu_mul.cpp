// SwiGLU's gate: silu(gate) * up over the fused gate/up projection's output, in one pass.
//
// Why: as torch ops this is a split, a silu and a multiply, three dispatches and two
// intermediate tensors per layer, which at one decoding row cost more than the arithmetic.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>

#include "vec_math.h"

namespace astrai {
namespace {

// gate_up (M, 2I): columns [0, I) gate, [I, 2I) up → (M, I).
at::Tensor silu_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.scalar_type() == at::kFloat && gate_up.size(1) % 2 == 0,
              "gate_up must be a (rows, 2 * intermediate) float32 tensor");
  const at::Tensor in = gate_up.contiguous();
  const int64_t rows = in.size(0), width = in.size(1) / 2;
  at::Tensor out = at::empty({rows, width}, in.options());
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(
      0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1)),
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* gate = src + r * 2 * width;
          const float* up = gate + width;
          float* o = dst + r * width;
          int64_t i = 0;
#if defined(__AVX2__)
          const __m256 one = _mm256_set1_ps(1.0f);
          for (; i + 8 <= width; i += 8) {
            const __m256 g = _mm256_loadu_ps(gate + i);
            const __m256 sig =
                _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
            _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
          }
#endif
          for (; i < width; ++i) o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
        }
      });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(astrai, m) { m.def("silu_mul(Tensor gate_up) -> Tensor"); }

TORCH_LIBRARY_IMPL(astrai, CPU, m) { m.impl("silu_mul", &silu_mul); }

}  // namespace astrai
