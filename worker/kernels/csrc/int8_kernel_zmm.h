// The 8-bit block kernel's AVX512-VNNI form: two tiles' records side by side in one 512-bit
// vector (16 columns), multiplied by `vpdpbusd` (four 8-bit products summed into each 32-bit
// lane) against activation rows rounded to 8 bits per block (int8_kernel.h).
//
// Why: the AVX2 form pays, per row, block and 256 multiply-adds, eight `vpmaddubsw`, seven
// 16-bit adds and one widening; here 512 multiply-adds are eight `vpdpbusd`, each reading its
// four inputs as an embedded broadcast, so prompt chunks run near the 8-bit peak instead of
// at its third. The integers are those of the AVX2 form and of ggml, and the float work after
// them is the same operations in the same order: both forms give the same bits.
//
// `vpdpbusd` multiplies unsigned by signed bytes, so every record is read as unsigned codes
// with an offset o (w = d (code - o) + m): Q4_1 and Q5_1 codes as they are (o = 0), Q5_0's
// 5-bit codes (o = 16), Q8_0's signed codes with their sign bit flipped (code + 128, o = 128).
// Per row and block, sum_i w_i x_i = d d_x (sum_i code_i q_i - o sum_i q_i) + m s_x.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define ASTRAI_INT8_ZMM 1

#include <cstdint>
#include <cstring>

#include "block_format.h"
#include "direct_kernel.h"
#include "int8_kernel.h"

namespace astrai {

// The same 32 bytes of two records, one in each half.
inline __m512i pair_bytes(const uint8_t* first, const uint8_t* second) {
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first));
  const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(second));
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

// The 8 fp16 of two records at the same offset, as 16 floats.
inline __m512 pair_halves(const uint8_t* first, const uint8_t* second) {
  const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(first));
  const __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i*>(second));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(low), high, 1));
}

// One block of two tiles: per group g the unsigned codes of inputs 4g..4g+3 of 16 columns.
struct PairBlock {
  __m512 scale, minimum;
  __m512i codes[8];
};

template <Records kFormat>
constexpr int32_t code_offset() {
  return kFormat == Records::kQ8_0 ? 128 : kFormat == Records::kQ5_0 ? 16 : 0;
}

template <Records kFormat>
constexpr bool has_minimum() {
  return kFormat == Records::kQ4_1 || kFormat == Records::kQ5_1;
}

// A block's codes of two tiles, as the record formats of block_format.h lay them out.
template <Records kFormat>
inline void read_pair(const uint8_t* a, const uint8_t* b, PairBlock& block) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  block.scale = pair_halves(a, b);
  block.minimum = has_minimum<kFormat>() ? pair_halves(a + 16, b + 16) : _mm512_setzero_ps();
  if constexpr (kFormat == Records::kQ8_0) {
    const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int g = 0; g < 8; ++g)
      block.codes[g] = _mm512_xor_si512(pair_bytes(a + 16 + 32 * g, b + 16 + 32 * g), sign);
  } else {
    // After the scales: (Q5_0 / Q5_1) each column's 32 high bits, then 4 groups of nibbles.
    constexpr int64_t kHigh = kFormat == Records::kQ5_1 ? 32 : 16;
    constexpr int64_t kNibbles = kFormat == Records::kQ4_1 ? 32 : kHigh + 32;
    for (int j = 0; j < 4; ++j) {
      const __m512i bytes = pair_bytes(a + kNibbles + 32 * j, b + kNibbles + 32 * j);
      block.codes[j] = _mm512_and_si512(bytes, nibble);
      block.codes[4 + j] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
    }
    if constexpr (kFormat != Records::kQ4_1) {
      // The high bit of code 4g + t sits at bit 8t + g of its column's word (q5_kernel.h).
      const __m512i high = pair_bytes(a + kHigh, b + kHigh), fifth = _mm512_set1_epi8(0x10);
      for (int g = 0; g < 8; ++g) {
        const __m512i moved =
            g >= 4 ? _mm512_srli_epi32(high, g - 4) : _mm512_slli_epi32(high, 4 - g);
        block.codes[g] = _mm512_or_si512(block.codes[g], _mm512_and_si512(moved, fifth));
      }
    }
  }
}

// The four activation codes at `offset`, in every lane (an embedded broadcast of vpdpbusd).
inline __m512i four_codes(const int8_t* codes, int64_t offset) {
  int32_t word;
  std::memcpy(&word, codes + offset, sizeof(word));
  return _mm512_set1_epi32(word);
}

// A pair's blocks as they lie in the records: read and unpacked by each row run (one run: a
// decode step of up to eight streams), the next ones requested ahead.
template <Records kFormat>
struct RecordPair {
  const uint8_t* first;
  const uint8_t* second;

  void block(int64_t b, PairBlock& out) const {
    constexpr int64_t kRecord = record_bytes(kFormat);
    const uint8_t* a = first + b * kRecord;
    const uint8_t* c = second + b * kRecord;
    for (int64_t line = 0; line < kRecord; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(a + kPrefetchBytes + line), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + kPrefetchBytes + line), _MM_HINT_T0);
    }
    read_pair<kFormat>(a, c, out);
  }
};

template <Records kFormat>
void unpack_pair(const uint8_t* first, const uint8_t* second, int64_t blocks, PairBlock* out) {
  const RecordPair<kFormat> records{first, second};
  for (int64_t b = 0; b < blocks; ++b) records.block(b, out[b]);
}

// out rows [row0, row0 + R) x the 16 columns of a pair of tiles, over every block of their
// records; each output starts from `init` (the residual) where given.
template <Records kFormat, int R>
void int8_tile_pair(const RecordPair<kFormat>& records, int64_t blocks, const Int8Rows& rows,
                    int64_t row0, float* out, const float* init, int64_t stride) {
  constexpr int32_t kOffset = code_offset<kFormat>();
  const int64_t per_row = rows.k / kBlock;
  __m512 acc[R];
  for (int r = 0; r < R; ++r)
    acc[r] = init == nullptr ? _mm512_setzero_ps() : _mm512_loadu_ps(init + (row0 + r) * stride);
  for (int64_t b = 0; b < blocks; ++b) {
    PairBlock block;
    records.block(b, block);
    // Group by group across the rows, so that consecutive vpdpbusd are independent (a row's
    // eight are a chain of dependent ones); unrolled, so that every sum stays in a register.
    const int8_t* q[R];
    __m512i dot[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      q[r] = rows.codes + (row0 + r) * rows.k + b * kBlock;
      dot[r] = kOffset == 0 ? _mm512_setzero_si512()
                            : _mm512_set1_epi32(-kOffset * rows.totals[(row0 + r) * per_row + b]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
        dot[r] = _mm512_dpbusd_epi32(dot[r], block.codes[g], four_codes(q[r], 4 * g));
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const int64_t at = (row0 + r) * per_row + b;
      const __m512 dw_dx = _mm512_mul_ps(block.scale, _mm512_set1_ps(rows.scales[at]));
      acc[r] = _mm512_fmadd_ps(dw_dx, _mm512_cvtepi32_ps(dot[r]), acc[r]);
      if constexpr (has_minimum<kFormat>())
        acc[r] = _mm512_fmadd_ps(block.minimum, _mm512_set1_ps(rows.sums[at]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + (row0 + r) * stride, acc[r]);
}

// The same products for many rows, C pairs of tiles at once (16 C columns), their blocks
// unpacked beforehand (unpack_pair, one array per pair). Why: int8_tile_pair's vpdpbusd each
// take one broadcast of a row's four activation codes, a load per product, and a row's eight
// form one dependent chain: with two pairs a broadcast feeds two products, and R x C chains
// are in flight. The operations per output are int8_tile_pair's, in its order: the same bits.
template <Records kFormat, int R, int C>
void int8_unpacked_tiles(const PairBlock* const (&pairs)[C], int64_t blocks, const Int8Rows& rows,
                         int64_t row0, float* out, const float* init, int64_t stride) {
  constexpr int32_t kOffset = code_offset<kFormat>();
  const int64_t per_row = rows.k / kBlock;
  __m512 acc[R][C];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c)
      acc[r][c] = init == nullptr ? _mm512_setzero_ps()
                                  : _mm512_loadu_ps(init + (row0 + r) * stride + 16 * c);
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* q[R];
    __m512i dot[R][C];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      q[r] = rows.codes + (row0 + r) * rows.k + b * kBlock;
      const __m512i start =
          kOffset == 0 ? _mm512_setzero_si512()
                       : _mm512_set1_epi32(-kOffset * rows.totals[(row0 + r) * per_row + b]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) dot[r][c] = start;
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      __m512i codes[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) codes[c] = pairs[c][b].codes[g];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512i x = four_codes(q[r], 4 * g);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) dot[r][c] = _mm512_dpbusd_epi32(dot[r][c], codes[c], x);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const int64_t at = (row0 + r) * per_row + b;
      const __m512 dx = _mm512_set1_ps(rows.scales[at]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const __m512 dw_dx = _mm512_mul_ps(pairs[c][b].scale, dx);
        acc[r][c] = _mm512_fmadd_ps(dw_dx, _mm512_cvtepi32_ps(dot[r][c]), acc[r][c]);
        if constexpr (has_minimum<kFormat>())
          acc[r][c] =
              _mm512_fmadd_ps(pairs[c][b].minimum, _mm512_set1_ps(rows.sums[at]), acc[r][c]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + (row0 + r) * stride + 16 * c, acc[r][c]);
}

}  // namespace astrai

#endif
