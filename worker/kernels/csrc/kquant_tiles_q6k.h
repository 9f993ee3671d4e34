// Grouped Q6_K (kquant_q6k_grouped.h) on the tile unit (kquant_tiles.h's arithmetic), with the
// tiles' roles swapped: the weights are the A tiles, the activations the B tiles.
//
// Why: an A tile's row is one weight row's 64 codes, which is how a grouped super-block holds
// them (code vector j: dword l = inputs 16 l + 4 j .. + 3, of scale group l), so each vector
// is scaled and split as it is loaded, with no transposition. The activations go the other
// way once per matmul (TiledCodes::fill, grouped_columns: B tile row l of run j holds the
// rows' inputs 16 l + 4 j .. + 3), and the sums come out as (weight row, activation row),
// gathered per task and transposed into the output once at its end. The codes' offset of 32
// comes off each scaled code in 16 bits ((code - 32) x scale), so the tiles' sums are ggml's
// integer sums as they are.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kquant_q6k_grouped.h"
#include "kquant_tiles.h"
#include "vec_math.h"

#if defined(ASTRAI_KQUANT_TILES)
namespace astrai {

// One super-block of 16 weight rows: per run their scaled codes (A tiles), and each row's d.
struct Q6KRowTile {
  ScaledCodes codes;
  alignas(64) float d[16];
};

// Weight rows 16 t .. 16 t + 15, super-block s, scaled and split into `tile`.
inline void unpack_q6k_rows(const uint8_t* weights, int64_t supers, int64_t t, int64_t s,
                            Q6KRowTile& tile) {
  const __m512i word = _mm512_set1_epi32(0xFFFF), byte = _mm512_set1_epi32(0xFF);
  for (int64_t r = 0; r < kTileColumns; ++r) {
    const uint8_t* super = weights + ((kTileColumns * t + r) * supers + s) * kQ6KBytes;
    for (int64_t line = 0; line < kQ6KBytes; line += 64)  // the super-block two on
      _mm_prefetch(reinterpret_cast<const char*>(super + 2 * kQ6KBytes + line), _MM_HINT_T0);
    const Q6KGrouped block(super);
    const ByteScales scale(_mm512_and_si512(block.scales, byte));
    // 32 x the group's scale in both 16-bit words of each dword.
    const __m512i offset = _mm512_slli_epi16(
        _mm512_or_si512(_mm512_and_si512(block.scales, word), _mm512_slli_epi32(block.scales, 16)),
        5);
    for (int64_t q = 0; q < kRuns; ++q)
      store_scaled(block.codes[q], scale, offset, tile.codes.high[q] + 64 * r,
                   tile.codes.low[q] + 64 * r);
    tile.d[r] = half_to_float(load_u16(super + 208));
  }
}

// acc (16 weight rows x `padded` activation rows) += super-block s of the row tiles
// [first_tile, first_tile + kRowTiles): per weight row r, d_r x the rows' scales (`xs`, this
// super-block's, in row order) x 64 high + low.
template <int kRowTiles>
inline void q6k_add_super_block(const Q6KRowTile& tile, const TiledCodes& codes, const float* xs,
                                int64_t s, int64_t first_tile, int64_t padded, float* acc) {
  alignas(64) int32_t sums[2][2][256];
  super_block_sums<kRowTiles, true>(codes.at(first_tile, s), codes.supers * kRuns * 1024,
                                    tile.codes, sums);
  for (int64_t r = 0; r < kTileColumns; ++r) {
    const __m512 d = _mm512_set1_ps(tile.d[r]);
    for (int64_t t = 0; t < kRowTiles; ++t) {
      const __m512i total =
          _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(sums[t][0] + 16 * r), 6),
                           _mm512_load_si512(sums[t][1] + 16 * r));
      const int64_t row = kTileRowsInt8 * (first_tile + t);
      float* a = acc + r * padded + row;
      const __m512 dx = _mm512_mul_ps(d, _mm512_loadu_ps(xs + row));
      const __m512 before = s == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(a);
      _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), dx, before));
    }
  }
}

// out (m, n) for the weight row tiles [first, last) of a grouped Q6_K weight; `codes` the
// activations in B order (TiledCodes::fill, grouped_columns), `xs` their scales as (super-blocks,
// padded rows).
inline void q6k_tiles_matmul(const uint8_t* weights, int64_t supers, const TiledCodes& codes,
                             const float* xs, int64_t m, int64_t first, int64_t last, float* out,
                             int64_t n) {
  const int64_t row_tiles = (m + kTileRowsInt8 - 1) / kTileRowsInt8;
  const int64_t padded = row_tiles * kTileRowsInt8;
  auto* tile = reinterpret_cast<Q6KRowTile*>(
      scratch(Scratch::kTileCodes, (sizeof(Q6KRowTile) + 64) / sizeof(float)));
  tile = reinterpret_cast<Q6KRowTile*>((reinterpret_cast<uintptr_t>(tile) + 63) & ~uintptr_t{63});
  float* acc = scratch(Scratch::kTileSums, kTileColumns * padded + 16);
  configure_tiles();
  for (int64_t t = first; t < last; ++t) {
    for (int64_t s = 0; s < supers; ++s) {
      unpack_q6k_rows(weights, supers, t, s, *tile);
      for (int64_t rt = 0; rt < row_tiles; rt += 2) {
        if (rt + 1 < row_tiles) {
          q6k_add_super_block<2>(*tile, codes, xs + s * padded, s, rt, padded, acc);
        } else {
          q6k_add_super_block<1>(*tile, codes, xs + s * padded, s, rt, padded, acc);
        }
      }
    }
    // acc is (16 weight rows, padded rows): out's columns 16 t .., transposed per 16 rows.
    for (int64_t rt = 0; rt < row_tiles; ++rt) {
      alignas(64) float block[16][16];
      transpose16(acc + kTileRowsInt8 * rt, padded, block[0], 16);
      const int64_t rows = std::min<int64_t>(kTileRowsInt8, m - kTileRowsInt8 * rt);
      for (int64_t i = 0; i < rows; ++i)
        _mm512_storeu_ps(out + (kTileRowsInt8 * rt + i) * n + kTileColumns * t,
                         _mm512_load_ps(block[i]));
    }
  }
  _tile_release();
}

}  // namespace astrai
#endif
