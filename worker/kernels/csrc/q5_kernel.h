// The block kernel for Q5_0 and Q5_1 records with 8-bit activations: the file's 5-bit codes,
// as many bytes a block as in the file, times activation rows rounded to 8 bits per block of 32
// (Q8_0's for Q5_0, Q8_1's for Q5_1: int8_kernel.h), as ggml's Q5_0 x Q8_0 and Q5_1 x Q8_1 dot
// products compute them.
//
// Why: widening the codes to Q8_0 records once (34 bytes a block) ran the same integer dot
// products but held half as much again of each tensor in memory; here each record's codes are
// widened in registers, once per record for all the rows of a pass.
//
// A record (block_format.h): fp16 d[8], (Q5_1) fp16 m[8]; for each column, a 32-bit word of
// the codes' high bits; then 4 groups j of 32 bytes: for each column, a 32-bit word whose byte
// t holds the low 4 bits of code 4j+t in its low nibble and of code 16+4j+t in its high one
// (the file's qs). The high bit of code i = 4g+t (g = 0..7, t = 0..3) sits at bit 8t+g of the
// word (the file's bit i, moved by worker/kernels/layout.py): one shift puts the bits of the 4
// codes of group g at bit 4 of the bytes that hold their low bits.
// Q5_0: w = d * (code - 16); Q5_1: w = d * code + m.
#pragma once

#include <cstdint>
#include <type_traits>

#include "block_format.h"
#include "direct_kernel.h"
#include "int8_kernel.h"

namespace astrai {

#if defined(__AVX2__)
// Per column, codes 4g..4g+3 as bytes 0..31.
template <int G>
inline __m256i five_bit_codes(__m256i low_bits, __m256i high_bits) {
  const __m256i moved =
      G >= 4 ? _mm256_srli_epi32(high_bits, G - 4) : _mm256_slli_epi32(high_bits, 4 - G);
  return _mm256_or_si256(low_bits, _mm256_and_si256(moved, _mm256_set1_epi8(0x10)));
}

// out rows [row0, row0 + R) x the 8 columns of one tile, over every block of its records, in
// integers per block: sum_i code_i q_i, less 16 sum_i q_i for Q5_0 (code - 16), plus m s for
// Q5_1 (s = d_x sum q, Q8_1's). Codes are at most 31 and |q| at most 127: a 16-bit pair sum is
// at most 7874, and four of them (31496) still fit before the widening to 32 bits.
template <bool kQ51, int R>
void five_bit_tile(const uint8_t* records, int64_t blocks, const Int8Rows& rows, int64_t row0,
                   float* out, const float* init, int64_t stride) {
  constexpr int64_t kRecord = kQ51 ? kQ51Record : kQ5Record;
  constexpr int64_t kHigh = kQ51 ? 32 : 16;  // the high bits' offset in a record
  const int64_t per_row = rows.k / kBlock;
  __m256 acc[R];
  for (int r = 0; r < R; ++r)
    acc[r] = init == nullptr ? _mm256_setzero_ps() : _mm256_loadu_ps(init + (row0 + r) * stride);
  const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* record = records + b * kRecord;
    for (int64_t line = 0; line < kRecord; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(record + kPrefetchBytes + line), _MM_HINT_T0);
    const __m256 scale = load_halves(record);
    const __m256 minimum = kQ51 ? load_halves(record + 16) : _mm256_setzero_ps();
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + kHigh));
    __m256i codes[8];  // codes[g]: codes 4g..4g+3 of each column
    auto unpack = [&](auto j) {
      constexpr int J = decltype(j)::value;
      const __m256i bytes =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + kHigh + 32 + 32 * J));
      codes[J] = five_bit_codes<J>(_mm256_and_si256(bytes, nibble), high);
      codes[4 + J] =
          five_bit_codes<4 + J>(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble), high);
    };
    unpack(std::integral_constant<int, 0>{});
    unpack(std::integral_constant<int, 1>{});
    unpack(std::integral_constant<int, 2>{});
    unpack(std::integral_constant<int, 3>{});
    for (int r = 0; r < R; ++r) {
      const int64_t at = (row0 + r) * per_row + b;
      const int8_t* q = rows.codes + (row0 + r) * rows.k + b * kBlock;
      __m256i half[2];
      for (int h = 0; h < 2; ++h) {
        __m256i sum = _mm256_maddubs_epi16(codes[4 * h], four_inputs(q, 16 * h));
        for (int g = 4 * h + 1; g < 4 * h + 4; ++g)
          sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(codes[g], four_inputs(q, 4 * g)));
        half[h] = _mm256_madd_epi16(sum, ones);
      }
      __m256i dot = _mm256_add_epi32(half[0], half[1]);
      if constexpr (!kQ51) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(16 * rows.totals[at]));
      const __m256 dw_dx = _mm256_mul_ps(scale, _mm256_set1_ps(rows.scales[at]));
      acc[r] = _mm256_fmadd_ps(dw_dx, _mm256_cvtepi32_ps(dot), acc[r]);
      if constexpr (kQ51) acc[r] = _mm256_fmadd_ps(minimum, _mm256_set1_ps(rows.sums[at]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + (row0 + r) * stride, acc[r]);
}
#endif

}  // namespace astrai
