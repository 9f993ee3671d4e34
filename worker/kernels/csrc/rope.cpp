// RoPE on a layer's projected q and k heads in one pass, rotate-half convention.
//
// Why: as torch ops (a negated copy, a cat, two multiplies and an add over every q and k head
// of every row) RoPE was a noticeable part of a prompt chunk's forward on 2 cores
// (docs/BENCHMARKS.md, Figures behind the code). The arithmetic is torch's: each product
// rounded, then their sum, no fused multiply-add, so the results are the same bits.
//
// Shapes: qkv (N, T, D) with rows of T heads (q, k, v), each head's D values contiguous;
// cos, sin (N, D); out (N, heads, D): the first `heads` heads rotated.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

#include "rope_head.h"

// After the includes: torch's own headers keep their flags. (clang ignores it, and fuses only
// within one expression: the products below are statements of their own.)
#pragma GCC optimize("fp-contract=off")

namespace astrai {

void rope_head(const float* __restrict x, const float* __restrict cos, const float* __restrict sin,
               int64_t dim, float* __restrict out) {
  const int64_t half = dim / 2;
  for (int64_t d = 0; d < half; ++d) {
    const float first = x[d] * cos[d];
    const float second = x[d + half] * sin[d];
    out[d] = first - second;
  }
  for (int64_t d = 0; d < half; ++d) {
    const float first = x[d + half] * cos[d + half];
    const float second = x[d] * sin[d + half];
    out[d + half] = first + second;
  }
}

namespace {

at::Tensor rope(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                int64_t heads) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.scalar_type() == at::kFloat, "qkv: (N, T, D) float32");
  const int64_t rows = qkv.size(0), dim = qkv.size(2);
  TORCH_CHECK(qkv.stride(2) == 1 && qkv.stride(1) == dim, "qkv: each row's heads contiguous");
  TORCH_CHECK(heads >= 1 && heads <= qkv.size(1) && dim % 2 == 0, "heads within qkv's, D even");
  for (const at::Tensor* table : {&cos, &sin}) {
    TORCH_CHECK(table->scalar_type() == at::kFloat && table->is_contiguous() &&
                    table->numel() == rows * dim,
                "cos and sin: (N, D) contiguous float32");
  }
  at::Tensor out = at::empty({rows, heads, dim}, qkv.options());
  const float* in = qkv.data_ptr<float>();
  const float* c = cos.data_ptr<float>();
  const float* s = sin.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t stride = qkv.stride(0);
  at::parallel_for(0, rows, std::max<int64_t>(1, 8192 / (heads * dim)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) {
                       for (int64_t h = 0; h < heads; ++h) {
                         rope_head(in + r * stride + h * dim, c + r * dim, s + r * dim, dim,
                                   o + (r * heads + h) * dim);
                       }
                     }
                   });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def("rope(Tensor qkv, Tensor cos, Tensor sin, int heads) -> Tensor");
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) { m.impl("rope", &rope); }

}  // namespace astrai
