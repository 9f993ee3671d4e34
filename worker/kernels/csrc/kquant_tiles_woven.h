// Woven Q4_K and Q5_K (kquant_gemv_zmm.h, kquant_q5k_woven.h) for the tile driver
// (kquant_tiles.h): a column tile is two woven groups; a B tile row p of a run is dword
// 2j + p % 2 of the woven run j = p / 2, so one dword permute of two groups' codes makes a
// row (rows 0-7 the run's low nibbles, its first sub-block; 8-15 the high ones, its second).
#pragma once

#include <cstdint>

#include "kquant_q5k_woven.h"
#include "kquant_tiles.h"
#include "row_runs.h"

#if defined(ASTRAI_KQUANT_TILES)
namespace astrai {

inline __m512 halves16(const uint8_t* left, const uint8_t* right) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(left));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(right));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
}

inline __m512i bytes16(uint64_t left, uint64_t right) {
  return _mm512_cvtepu8_epi32(
      _mm_set_epi64x(static_cast<int64_t>(right), static_cast<int64_t>(left)));
}

template <bool kFive>
struct WovenTiles {
  static constexpr int64_t kBytes = kFive ? kQ5KWovenBytes : kQ4KWovenBytes;

  // One super-block of one column tile: the scaled codes, the minimums of sub-blocks 2p and
  // 2p + 1 as 16-bit pairs per column, d and dmin.
  struct Tile {
    ScaledCodes codes;
    __m512i min_pair[4];
    __m512 d, dmin;
  };

  static void unpack(const uint8_t* weights, int64_t supers, int64_t column_tile, int64_t s,
                     Tile& tile) {
    const uint8_t* left = weights + (2 * column_tile * supers + s) * kBytes;
    const uint8_t* right = left + supers * kBytes;
    alignas(64) uint64_t sc[2][8], mn[2][8];
    q4_k_scale_bytes(left, sc[0], mn[0]);
    q4_k_scale_bytes(right, sc[1], mn[1]);
    for (int p = 0; p < 4; ++p)
      tile.min_pair[p] =
          _mm512_or_si512(bytes16(mn[0][2 * p], mn[1][2 * p]),
                          _mm512_slli_epi32(bytes16(mn[0][2 * p + 1], mn[1][2 * p + 1]), 16));
    tile.d = halves16(left, right);
    tile.dmin = halves16(left + 16, right + 16);
    const __m512i nibble = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t q = 0; q < kRuns; ++q) {  // sub-blocks 2q (low nibbles) and 2q + 1 (high)
      const ByteScales scale[2] = {ByteScales(bytes16(sc[0][2 * q], sc[1][2 * q])),
                                   ByteScales(bytes16(sc[0][2 * q + 1], sc[1][2 * q + 1]))};
      for_each_index<4>([&]<int J>() {
        const __m512i a = _mm512_loadu_si512(left + 128 + 256 * q + 64 * J);
        const __m512i b = _mm512_loadu_si512(right + 128 + 256 * q + 64 * J);
        __m512i codes[2][2] = {
            {_mm512_and_si512(a, nibble), _mm512_and_si512(_mm512_srli_epi16(a, 4), nibble)},
            {_mm512_and_si512(b, nibble), _mm512_and_si512(_mm512_srli_epi16(b, 4), nibble)}};
        if constexpr (kFive) {
          const uint8_t* side[2] = {left, right};
          for (int g = 0; g < 2; ++g) {
            const __m512i plane = _mm512_loadu_si512(side[g] + kQ5KFifthBits + 64 * q);
            codes[g][0] = with_fifth_bit<2 * J>(codes[g][0], plane);
            codes[g][1] = with_fifth_bit<2 * J + 1>(codes[g][1], plane);
          }
        }
        for (int h = 0; h < 2; ++h) {
          const int64_t row = 64 * (8 * h + 2 * J);
          store_scaled(_mm512_permutex2var_epi32(codes[0][h], even, codes[1][h]), scale[h], zero,
                       tile.codes.high[q] + row, tile.codes.low[q] + row);
          store_scaled(_mm512_permutex2var_epi32(codes[0][h], odd, codes[1][h]), scale[h], zero,
                       tile.codes.high[q] + row + 64, tile.codes.low[q] + row + 64);
        }
      });
    }
  }

  // kCols column tiles' factors, held in registers across a super-block's rows.
  template <int kCols>
  struct Columns {
    __m512i min_pair[kCols][4];
    __m512 d[kCols], dmin[kCols];

    explicit Columns(const Tile* tiles) {
      for (int c = 0; c < kCols; ++c) {
        for (int p = 0; p < 4; ++p) min_pair[c][p] = tiles[c].min_pair[p];
        d[c] = tiles[c].d;
        dmin[c] = tiles[c].dmin;
      }
    }

    // out[16 c ..] (+)= the row's super-block s: d x_scale total - dmin x_scale sum over
    // sub-blocks of the minimum times the row's inputs' sum.
    void add_row(const QuantizedRows& x, int64_t row, int64_t s, const __m512i* total, float* out,
                 bool first) const {
      const __m512 xs = _mm512_set1_ps(x.scale(row, s));
      const int32_t* pairs = x.row_pair_sums(row, s);
      __m512i pair[4];
      for (int p = 0; p < 4; ++p) pair[p] = _mm512_set1_epi32(pairs[p]);
      for (int c = 0; c < kCols; ++c) {
        __m512i m = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) m = _mm512_dpwssd_epi32(m, min_pair[c][p], pair[p]);
        float* o = out + kTileColumns * c;
        __m512 acc = first ? _mm512_setzero_ps() : _mm512_loadu_ps(o);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total[c]), _mm512_mul_ps(d[c], xs), acc);
        acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dmin[c], xs), acc);
        _mm512_storeu_ps(o, acc);
      }
    }
  };
};

}  // namespace astrai
#endif
