// Q6_K weights as the file holds them times a few rows of activations in 8-bit integers
// (AVX-512 VNNI): kquant_gemv.h's arithmetic and activation rows, for Q6_K's 16-input scales
// and codes offset by 32.
#pragma once

#include <cstdint>

#include "kquant_gemv.h"

#if defined(ASTRAI_KQUANT_GEMV)
namespace astrai {

// Q6_K super-block `super` of one row as 4 vectors of 64 codes 0..63 in input order
// (dequantize_row_q6_K's order), and its 16 scales as int32 lanes: scale[j] the scales of
// codes[j] (each of a vector's 16 dot-product lanes of 4 inputs gets its 16 inputs' scale),
// all16 the 16 scales once each.
struct Q6KBlock {
  __m512i codes[4], scale[4], all16;

  explicit Q6KBlock(const uint8_t* super) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), two = _mm512_set1_epi8(0x03);
    // Per 16-bit word: the high bits' shift for the first 32 bytes and for the last 32.
    const __m512i first = _mm512_set_epi64(0x0002000200020002, 0x0002000200020002, 0x0002000200020002,
                                           0x0002000200020002, 0, 0, 0, 0);
    const __m512i second = _mm512_set_epi64(0x0006000600060006, 0x0006000600060006, 0x0006000600060006,
                                            0x0006000600060006, 0x0004000400040004, 0x0004000400040004,
                                            0x0004000400040004, 0x0004000400040004);
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(super + 64 * half);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + 128 + 32 * half)));
      const __m512i high_a = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, first), two), 4);
      const __m512i high_b = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, second), two), 4);
      codes[2 * half] = _mm512_or_si512(_mm512_and_si512(ql, low4), high_a);
      codes[2 * half + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), high_b);
    }
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(super + 192));
    for (int j = 0; j < 4; ++j) {
      const __m128i spread = _mm_set_epi8(4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 2,
                                          4 * j + 2, 4 * j + 2, 4 * j + 2, 4 * j + 1, 4 * j + 1,
                                          4 * j + 1, 4 * j + 1, 4 * j, 4 * j, 4 * j, 4 * j);
      scale[j] = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(scales, spread));
    }
    all16 = _mm512_cvtepi8_epi32(scales);
  }
};

// Bytes of Q6_K rows requested ahead of the super-block being multiplied.
constexpr int64_t kQ6KPrefetchAhead = 8 * kQ6KBytes;

// out[r][c] for rows r < kRows of `x` and Q6_K row c: d s Σ sc (code - 32) x per 16 inputs.
template <int kRows>
inline void q6_k_gemv_row(const uint8_t* weights, int64_t supers, int64_t c,
                          const QuantizedRows& x, int64_t first_row, float* out, int64_t n) {
  __m512 dot[kRows];
  for (int r = 0; r < kRows; ++r) dot[r] = _mm512_setzero_ps();
  const uint8_t* row_bytes = weights + c * supers * kQ6KBytes;
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* super = row_bytes + s * kQ6KBytes;
    for (int64_t line = 0; line < kQ6KBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(super + kQ6KPrefetchAhead + line), _MM_HINT_T0);
    const Q6KBlock block(super);
    const float d = half_to_float(load_u16(super + 208));
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first_row + r;
      const int8_t* codes = x.row_codes(row) + s * kSuperBlock;
      __m512i sum = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), block.codes[j],
                                              _mm512_loadu_si512(codes + 64 * j));
        sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(a, block.scale[j]));
      }
      // The codes' offset of 32: 32 Σ sc times each 16 inputs' sum of activations.
      const __m512i sums = _mm512_loadu_si512(x.row_sums(row, s));
      sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(_mm512_mullo_epi32(sums, block.all16), 5));
      dot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(d * x.scale(row, s)), dot[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) out[(first_row + r) * n + c] = _mm512_reduce_add_ps(dot[r]);
}

// out (m, n) = x (m, k) times the Q6_K weight (n, k / 256 x 210 bytes), for rows [first, last):
// activation rows eight at a time (each super-block is unpacked once per eight).
// Rows before `from` are left alone.
inline void q6_k_gemv_rows(const uint8_t* weights, int64_t supers, const QuantizedRows& x,
                           int64_t m, int64_t first, int64_t last, float* out, int64_t n,
                           int64_t from = 0) {
  for (int64_t c = first; c < last; ++c) {
    in_runs_of<8>(m - from, [&]<int kRows>(int64_t row) {
      q6_k_gemv_row<kRows>(weights, supers, c, x, from + row, out, n);
    });
  }
}

}  // namespace astrai
#endif
