// Grouped Q6_K (kquant_q6k_grouped.h) for the tile driver (kquant_tiles.h): a column tile is
// 16 weight rows, each its own grouped super-block. Per super-block their code vectors (dword
// l of vector j: inputs 16 l + 4 j .. + 3) and scales are transposed 16 x 16 so that dword c
// is column c's; B tile row p of run q is then dword row 4 q + p / 4 of vector p % 4. The
// codes' offset of 32 comes off each scaled code in 16 bits ((code - 32) x scale), so the
// tiles' sums are ggml's integer sums as they are.
#pragma once

#include <cstdint>

#include "kquant_q6k_grouped.h"
#include "kquant_tiles.h"
#include "vec_math.h"

#if defined(ASTRAI_KQUANT_TILES)
namespace astrai {

struct Q6KTiles {
  // One super-block of one column tile: the scaled codes and d.
  struct Tile {
    ScaledCodes codes;
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
    for (int64_t group = 0; group < 16; ++group) {
      const __m512i scale = _mm512_load_si512(by_group[4][group]);  // int32 lanes
      // 32 x the scale in both 16-bit words of each column's dword.
      const __m512i offset = _mm512_slli_epi16(
          _mm512_or_si512(_mm512_and_si512(scale, word), _mm512_slli_epi32(scale, 16)), 5);
      const int64_t q = group / 4;
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t r = 4 * (group % 4) + j;  // B tile row of run q
        store_scaled(_mm512_load_si512(by_group[j][group]), _mm512_and_si512(scale, byte), offset,
                     tile.codes.high[q] + 64 * r, tile.codes.low[q] + 64 * r);
      }
    }
  }

  // acc + the row's super-block: d x_scale total.
  static __m512 add_row(const Tile& tile, const QuantizedRows& x, int64_t row, int64_t s,
                        __m512i total, __m512 acc) {
    const __m512 dx = _mm512_mul_ps(tile.d, _mm512_set1_ps(x.scale(row, s)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), dx, acc);
  }
};

}  // namespace astrai
#endif
