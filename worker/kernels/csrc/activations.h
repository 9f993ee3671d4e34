// The activation rows a block matmul reads, prepared in one pass: the optional SwiGLU gate and
// RMSNorm a decoder layer applies before the matmul, then the kernel's per-input scaling.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "vec_math.h"

namespace astrai {

constexpr int64_t kBlock = 32;  // inputs per quantization block

// What happens to each input row before the matmul, in this order.
struct Prologue {
  bool gated = false;                  // row = [gate | up] (2k wide): silu(gate) * up
  const float* norm_weight = nullptr;  // RMSNorm with this weight (k) and eps
  float eps = 0.0f;
};

// The kernel reads each Q4_1 code as an integer still shifted left by 8 * (i % 4) bits (the
// byte it sits in), which saves a shift per input; the activations are scaled by the inverse
// power of two instead, exactly. Q8_0 codes are read shifted to the top byte: 2^24 each.
inline float input_scale(int64_t i, bool q8) {
  return q8 ? 0x1p-24f : std::ldexp(1.0f, -8 * static_cast<int>(i % 4));
}

// x scaled per input position, and for Q4_1 the sum of each block's 32 inputs (the factor of
// the block's minimum). Values so small that scaling would make them subnormal are dropped:
// they contribute nothing, and subnormal arithmetic is slow.
struct Rows {
  float* x;     // (m, k)
  float* sums;  // (m, k / 32), or null
  int64_t k;
};

// Grow-only buffers, one per use and thread, reused from call to call: a fresh vector each
// call cost a page fault per 4 KB touched, 0.7 ms for 512 rows of 576 inputs on a KVM guest,
// more than the arithmetic of a small layer. Valid until the same thread asks again.
enum class Scratch {
  kRows,
  kSums,
  kInterleaved,
  kSplitParts,
  kSplitSums,
  kAmxPanel,
  kAmxScales,
  kInt8Codes,
  kInt8Scales,
  kInt8Sums,
  kInt8Totals,
  kTileCodes,
  kTileSums,
  kCount  // the number of uses
};

inline float* scratch(Scratch use, int64_t n) {
  thread_local std::vector<float> buffers[static_cast<int>(Scratch::kCount)];
  std::vector<float>& buffer = buffers[static_cast<int>(use)];
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(n);
  return buffer.data();
}

inline void gate_row(const float* gate_up, int64_t k, float* out) {
  const float* up = gate_up + k;
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= k; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate_up + i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
#endif
  for (; i < k; ++i) out[i] = gate_up[i] / (1.0f + std::exp(-gate_up[i])) * up[i];
}

inline void norm_row(float* row, int64_t k, const float* weight, float eps) {
  double squares = 0.0;
  for (int64_t i = 0; i < k; ++i) squares += static_cast<double>(row[i]) * row[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(squares / k) + eps);
  for (int64_t i = 0; i < k; ++i) row[i] = weight[i] * (row[i] * inv);
}

inline void scale_row(float* row, int64_t k, bool q8, float* sums) {
  float scale[kBlock];
  for (int64_t i = 0; i < kBlock; ++i) scale[i] = input_scale(i, q8);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    float* block = row + b * kBlock;
    float total = 0.0f;
    for (int64_t i = 0; i < kBlock; ++i) {
      total += block[i];
      block[i] = std::fabs(block[i]) < 0x1p-100f ? 0.0f : block[i] * scale[i];
    }
    if (sums != nullptr) sums[b] = total;
  }
}

// x is (m, k), or (m, 2k) when the prologue is gated. `for_direct`: scaled and summed for the
// direct kernel; otherwise the rows as they are after the prologue (the panel kernel's input).
inline Rows prepare_rows(const float* x, int64_t m, int64_t k, bool q8, const Prologue& pro,
                         bool for_direct) {
  const bool sums = for_direct && !q8;
  Rows rows{scratch(Scratch::kRows, m * k),
            sums ? scratch(Scratch::kSums, m * (k / kBlock)) : nullptr, k};
  const int64_t in_width = pro.gated ? 2 * k : k;
  parallel_chunks(m, std::max<int64_t>(1, 8192 / k), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = rows.x + r * k;
      const float* src = x + r * in_width;
      if (pro.gated) {
        gate_row(src, k, row);
      } else {
        std::copy_n(src, k, row);
      }
      if (pro.norm_weight != nullptr) norm_row(row, k, pro.norm_weight, pro.eps);
      if (for_direct) scale_row(row, k, q8, sums ? rows.sums + r * (k / kBlock) : nullptr);
    }
  });
  return rows;
}

}  // namespace astrai
