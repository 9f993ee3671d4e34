// The block kernel with 8-bit activations: Q4_1 / Q8_0 records (block_format.h) times
// activation rows rounded to 8 bits per block of 32, as ggml computes these files (Q8_1
// activations for Q4_1, Q8_0 for Q8_0): integer dot products per block, scaled once per block.
//
// Why: this is the file's own arithmetic (llama.cpp's results on the same file), and on an
// AVX2 core one vpmaddubsw does 32 multiply-adds where an FMA does 8, so many rows (prompt
// chunks, large batches) multiply faster than in float32. Per block and column:
//   sum_i w_i x_i = d_w d_x sum_i code_i q_i (+ m_w s_x for Q4_1, s_x = d_x sum_i q_i).
// The activations' scales are rounded through fp16 as ggml stores them. On AVX512-VNNI CPUs
// tiles run in pairs through int8_kernel_zmm.h instead; the ymm form here takes the rest.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "activations.h"
#include "block_format.h"
#include "direct_kernel.h"

namespace astrai {

// Activation rows in 8 bits: per row k codes, per block its scale d, (Q4_1) s = d * sum q
// and (Q5_0) the integer sum q.
struct Int8Rows {
  const int8_t* codes;    // (m, k)
  const float* scales;    // (m, k / 32)
  const float* sums;      // (m, k / 32)
  const int32_t* totals;  // (m, k / 32)
  int64_t k;
};

inline float through_half(float value) { return _cvtsh_ss(_cvtss_sh(value, 0)); }

// One row of k floats → codes, scales and sums, as ggml's x86 quantize_row_q8_1 (q8_0 alike):
// d = max |x| / 127, q = x * (127 / max |x|) rounded to nearest even.
inline void quantize_row_int8(const float* x, int64_t k, int8_t* codes, float* scales, float* sums,
                              int32_t* totals) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* in = x + b * kBlock;
    int8_t* out = codes + b * kBlock;
    int32_t sum = 0;
#if defined(__AVX2__)
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 top = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(in + 8 * i);
      top = _mm256_max_ps(top, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 top4 = _mm_max_ps(_mm256_extractf128_ps(top, 1), _mm256_castps256_ps128(top));
    top4 = _mm_max_ps(top4, _mm_movehl_ps(top4, top4));
    top4 = _mm_max_ss(top4, _mm_movehdup_ps(top4));
    const float amax = _mm_cvtss_f32(top4);
    const __m256 inverse = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], inverse),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i total =
        _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i half = _mm_add_epi32(_mm256_extracti128_si256(total, 1), _mm256_castsi256_si128(total));
    half = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0x4E));
    half = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0xB1));
    sum = _mm_cvtsi128_si32(half);
    // Packing interleaves the 128-bit lanes; the permutation puts the codes back in order.
    const __m256i words = _mm256_packs_epi32(q[0], q[1]), words2 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes = _mm256_packs_epi16(words, words2);
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(out),
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
#else
    float amax = 0.0f;
    for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(in[i]));
    const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t i = 0; i < kBlock; ++i) {
      const int32_t value = static_cast<int32_t>(std::nearbyint(in[i] * inverse));
      out[i] = static_cast<int8_t>(value);
      sum += value;
    }
#endif
    const float d = amax / 127.0f;
    scales[b] = through_half(d);
    sums[b] = through_half(d * static_cast<float>(sum));
    totals[b] = sum;
  }
}

#if defined(__AVX2__)
// The 32-bit word of `codes` at `offset`, in every lane: four inputs for all 8 columns.
inline __m256i four_inputs(const int8_t* codes, int64_t offset) {
  int32_t word;
  std::memcpy(&word, codes + offset, sizeof(word));
  return _mm256_set1_epi32(word);
}

// Per column, the integer dot product of a Q4_1 record's 32 codes with one row's block.
// Codes are at most 15 and |q| at most 127: a 16-bit pair sum is at most 3810, and eight of
// them (30480) still fit before the widening to 32 bits.
inline __m256i q4_1_dot(const __m256i low[4], const __m256i high[4], const int8_t* q) {
  __m256i sum = _mm256_maddubs_epi16(low[0], four_inputs(q, 0));
  sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(high[0], four_inputs(q, 16)));
  for (int j = 1; j < 4; ++j) {
    sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(low[j], four_inputs(q, 4 * j)));
    sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(high[j], four_inputs(q, 16 + 4 * j)));
  }
  return _mm256_madd_epi16(sum, _mm256_set1_epi16(1));
}

// The same for a Q8_0 record: signed codes, so |w| times q with w's sign (a pair sum is at
// most 2 * 127 * 127 = 32258: widened to 32 bits after each group).
inline __m256i q8_0_dot(const uint8_t* record, const int8_t* q) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i sum = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 16 + 32 * g));
    const __m256i pairs =
        _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(four_inputs(q, 4 * g), w));
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, ones));
  }
  return sum;
}

// out rows [row0, row0 + R) × the 8 columns of one tile, over every block of its records;
// each output starts from `init` (the residual) where given.
template <bool kQ8, int R>
void int8_tile(const uint8_t* records, int64_t blocks, const Int8Rows& rows, int64_t row0,
               float* out, const float* init, int64_t stride) {
  constexpr int64_t kRecord = kQ8 ? kQ8Record : kQ4Record;
  const int64_t per_row = rows.k / kBlock;
  __m256 acc[R];
  for (int r = 0; r < R; ++r)
    acc[r] = init == nullptr ? _mm256_setzero_ps() : _mm256_loadu_ps(init + (row0 + r) * stride);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* record = records + b * kRecord;
    for (int64_t line = 0; line < kRecord; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(record + kPrefetchBytes + line), _MM_HINT_T0);
    const __m256 scale = load_halves(record);
    __m256i low[4], high[4];
    __m256 minimum = _mm256_setzero_ps();
    if constexpr (!kQ8) {
      minimum = load_halves(record + 16);
      for (int j = 0; j < 4; ++j) {
        const __m256i group =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 32 + 32 * j));
        low[j] = _mm256_and_si256(group, nibble);
        high[j] = _mm256_and_si256(_mm256_srli_epi16(group, 4), nibble);
      }
    }
    for (int r = 0; r < R; ++r) {
      const int64_t at = (row0 + r) * per_row + b;
      const int8_t* q = rows.codes + (row0 + r) * rows.k + b * kBlock;
      __m256i dot;
      if constexpr (kQ8) {
        dot = q8_0_dot(record, q);
      } else {
        dot = q4_1_dot(low, high, q);
      }
      const __m256 dw_dx = _mm256_mul_ps(scale, _mm256_set1_ps(rows.scales[at]));
      acc[r] = _mm256_fmadd_ps(dw_dx, _mm256_cvtepi32_ps(dot), acc[r]);
      if constexpr (!kQ8) acc[r] = _mm256_fmadd_ps(minimum, _mm256_set1_ps(rows.sums[at]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + (row0 + r) * stride, acc[r]);
}
#endif

}  // namespace astrai
