// Grouped Q6_K (kquant_q6k_grouped.h) for the tile driver (kquant_tiles.h): a column tile is
// 16 weight rows, each its own grouped super-block. Per super-block their code vectors (dword
// l of vector j: inputs 16 l + 4 j .. + 3) and scales are transposed 16 x 16 so that dword c
// is column c's; B tile row p of run q is then dword row 4 q + p / 4 of vector p % 4. The
// codes' offset of 32 is taken back per row as 32 x sum over groups of scale x the row's
// inputs' sum, as the gemv does.
#pragma once

#include <cstdint>

#include "kquant_q6k_grouped.h"
#include "kquant_tiles.h"
#include "vec_math.h"

#if defined(ASTRAI_KQUANT_TILES)
namespace astrai {

struct Q6KTiles {
  // One super-block of one column tile: the scaled codes, each column's scales of groups 2p
  // and 2p + 1 as 16-bit pairs, and d.
  struct Tile {
    ScaledCodes codes;
    __m512i scale_pair[8];
    __m512 d;
  };

  static void unpack(const uint8_t* weights, int64_t supers, int64_t column_tile, int64_t s,
                     Tile& tile) {
    // [code vector j, or 4: the scales][column][group l], then [..][group l][column].
    alignas(64) int32_t by_column[5][16][16], by_group[5][16][16];
    alignas(32) uint16_t d[16];
    for (int c = 0; c < 16; ++c) {
      const uint8_t* super = weights + ((16 * column_tile + c) * supers + s) * kQ6KBytes;
      const Q6KGrouped block(super);
      for (int j = 0; j < 4; ++j) _mm512_store_si512(by_column[j][c], block.codes[j]);
      _mm512_store_si512(by_column[4][c], block.scales);
      d[c] = load_u16(super + 208);
    }
    for (int v = 0; v < 5; ++v)
      transpose16(reinterpret_cast<const float*>(by_column[v][0]), 16,
                  reinterpret_cast<float*>(by_group[v][0]), 16);
    tile.d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
    const __m512i word = _mm512_set1_epi32(0xFFFF), byte = _mm512_set1_epi32(0xFF);
    for (int p = 0; p < 8; ++p)
      tile.scale_pair[p] =
          _mm512_or_si512(_mm512_and_si512(_mm512_load_si512(by_group[4][2 * p]), word),
                          _mm512_slli_epi32(_mm512_load_si512(by_group[4][2 * p + 1]), 16));
    for (int64_t q = 0; q < kRuns; ++q) {
      for (int64_t r = 0; r < 16; ++r) {
        const int64_t group = 4 * q + r / 4;
        store_scaled(_mm512_load_si512(by_group[r % 4][group]),
                     _mm512_and_si512(_mm512_load_si512(by_group[4][group]), byte),
                     tile.codes.high[q] + 64 * r, tile.codes.low[q] + 64 * r);
      }
    }
  }

  // acc + the row's super-block: d x_scale (total - 32 sum over groups of scale x the row's
  // inputs' sum).
  static __m512 add_row(const Tile& tile, const QuantizedRows& x, int64_t row, int64_t s,
                        __m512i total, __m512 acc) {
    // The 16 sums of 16 inputs (each within 16 x 127) as 16-bit pairs: dword p, groups 2p, 2p + 1.
    alignas(32) int32_t pairs[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(pairs),
                       _mm512_cvtepi32_epi16(_mm512_loadu_si512(x.row_sums(row, s))));
    __m512i offset = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p)
      offset = _mm512_dpwssd_epi32(offset, tile.scale_pair[p], _mm512_set1_epi32(pairs[p]));
    total = _mm512_sub_epi32(total, _mm512_slli_epi32(offset, 5));
    const __m512 dx = _mm512_mul_ps(tile.d, _mm512_set1_ps(x.scale(row, s)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), dx, acc);
  }
};

}  // namespace astrai
#endif
