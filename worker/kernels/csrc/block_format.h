// The weight records of the block kernels (written by worker/kernels/layout.py), read here.
//
// Output features in tiles of 8, and per tile and block of 32 inputs one record, so that one
// sequential stream feeds the kernels (four separate row streams ran 2.5x slower on an AVX2
// EPYC: its prefetchers do not follow them):
//   Q4_1 (160 bytes): fp16 d[8], fp16 m[8], then 4 groups j of 32 bytes: for each column c, a
//        32-bit word whose byte t holds code 4j+t in its low and code 16+4j+t in its high
//        nibble; w = d * code + m, code in 0..15.
//   Q8_0 (272 bytes): fp16 d[8], then 8 groups g of 32 bytes: for each column c, a 32-bit word
//        whose byte t is code 4g+t as int8; w = d * code, code in -127..127.
//   Q5_0 (176 bytes): fp16 d[8], each column's 32 high bits (in the order q5_kernel.h
//        reads), then Q4_1's 4 groups of low nibbles; w = d * (code - 16), code in 0..31
//        (8-bit activations only: q5_kernel.h).
//   Q5_1 (192 bytes): fp16 d[8], fp16 m[8], then as Q5_0; w = d * code + m.
// Read as eight 32-bit lanes, a group yields by one mask (and for some inputs one shift) the
// codes of one input for all 8 columns at once, still shifted left by the position of the
// byte they sit in: 2^(8 (i % 4)) for Q4_1, 2^24 for Q8_0. The kernels undo that exactly, by
// powers of two applied to the activations or the scales.
#pragma once

#include <cstdint>

#include "vec_math.h"

namespace astrai {

constexpr int64_t kTile = 8;  // output features per record
constexpr int64_t kQ4Record = 160;
constexpr int64_t kQ8Record = 272;
constexpr int64_t kQ5Record = 176;
constexpr int64_t kQ51Record = 192;

// The record formats block_linear takes (ops.h).
enum class Records { kQ4_1, kQ8_0, kQ5_0, kQ5_1 };

template <bool kQ8>
constexpr int64_t record_bytes() {
  return kQ8 ? kQ8Record : kQ4Record;
}

constexpr int64_t record_bytes(Records format) {
  switch (format) {
    case Records::kQ4_1:
      return kQ4Record;
    case Records::kQ8_0:
      return kQ8Record;
    case Records::kQ5_0:
      return kQ5Record;
    case Records::kQ5_1:
      return kQ51Record;
  }
  return 0;
}

// Formats the block kernels read only with 8-bit activations (no float32 kernels).
constexpr bool int8_only(Records format) {
  return format == Records::kQ5_0 || format == Records::kQ5_1;
}

#if defined(__AVX2__)
inline __m256 load_halves(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 8 columns' codes of input `i` of a block, as floats times 2^(8 (i % 4)) (Q4_1) or 2^24.
template <bool kQ8>
inline __m256 codes_of(const uint8_t* rec, int i) {
  const int t = i % 4;
  if constexpr (kQ8) {
    const __m256i lanes =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 16 + 32 * (i / 4)));
    const __m256i top = t == 3 ? lanes : _mm256_slli_epi32(lanes, 24 - 8 * t);
    return _mm256_cvtepi32_ps(
        _mm256_and_si256(top, _mm256_set1_epi32(static_cast<int>(0xFF000000u))));
  } else {
    __m256i lanes =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32 + 32 * ((i % 16) / 4)));
    if (i >= 16) lanes = _mm256_srli_epi32(lanes, 4);  // the compiler shares it across t
    return _mm256_cvtepi32_ps(_mm256_and_si256(lanes, _mm256_set1_epi32(0x0F << (8 * t))));
  }
}
#endif

}  // namespace astrai
