// The 8-bit K-quant gemv's arithmetic (kquant_gemv.h) on the tile unit (AMX-INT8), for many
// rows: the driver the formats share (woven Q4_K and Q5_K: kquant_tiles_woven.h; grouped Q6_K:
// kquant_tiles_q6k.h).
//
// Why: from a few rows on the gemv is bound by its instructions: each vpdpbusd's 64
// multiply-adds come with a broadcast of the row's activations and a share of the scales'
// work. One tile product here is 16 rows x 16 columns x 64 inputs, 16,384 multiply-adds.
//
// How the sub-block scales stay exact: ggml sums, per super-block, scale_b x (codes . x) over
// its sub-blocks in integers. Each code times its sub-block's scale (Q4_K at most 15 x 63,
// Q5_K 31 x 63, Q6_K (code - 32) x scale at most 32 x 128) is split as 64 high + low, low 0..63 and
// high a signed byte; the tiles sum x . high and x . low over the whole super-block, and 64 high +
// low is ggml's integer sum. So a super-block's products stay in the tiles, leaving them once for
// the float32 scales, where a tile store per sub-block (its reload waits on the store) cost four
// times the product.
//
// Layout: the A tiles are the activation rows' codes as they lie (16 rows x 64 bytes, the
// rows' stride apart); a B tile holds one 64-input run of 16 columns, its row p each
// column's inputs 4p .. 4p + 3 (the tile unit's layout). A task's columns are unpacked once
// per super-block and serve all its rows.
#pragma once

#include <algorithm>
#include <cstdint>

#include "activations.h"
#include "amx_panel_kernel.h"
#include "kquant_gemv.h"

#if defined(ASTRAI_AMX) && defined(__AMX_INT8__) && defined(ASTRAI_KQUANT_GEMV_ZMM)
#define ASTRAI_KQUANT_TILES 1
namespace astrai {

constexpr int64_t kTileRowsInt8 = 16;  // activation rows per A tile
constexpr int64_t kTileColumns = 16;   // output columns per B tile
constexpr int64_t kRuns = 4;           // 64-input runs per super-block
constexpr int64_t kColumnTiles = 2;    // per task: 32 columns

// The tiles as amx_panel_kernel.h's configure_tiles sets them, all 16 rows of 64 bytes: 0-1
// two row tiles' codes of one run; 2-3 a column tile's high and low parts of it; 4-7 the sums
// (row tile 0 high, low; row tile 1 high, low).

// One super-block of a column tile's scaled codes, per run the B tiles of the high and low
// parts.
struct ScaledCodes {
  alignas(64) uint8_t high[kRuns][1024];
  alignas(64) uint8_t low[kRuns][1024];
};

// A B-tile row of codes (16 columns x 4, unsigned) times its columns' scales (`scale`: byte 0
// of dword n column n's, as a signed byte; the others 0), less `offset` (16-bit words: each
// column's offset x scale, in both of its dword's words; Q6_K's codes are stored plus 32),
// split into 64 high + low, into the high and low tiles' rows.
inline void store_scaled(__m512i codes, __m512i scale, __m512i offset, uint8_t* high,
                         uint8_t* low) {
  const __m512i even = _mm512_or_si512(scale, _mm512_slli_epi32(scale, 16));  // (s, 0, s, 0)
  const __m512i odd = _mm512_slli_epi32(even, 8);                             // (0, s, 0, s)
  const __m512i first = _mm512_sub_epi16(_mm512_maddubs_epi16(codes, even), offset);
  const __m512i second = _mm512_sub_epi16(_mm512_maddubs_epi16(codes, odd), offset);
  const __m512i six = _mm512_set1_epi16(63), byte = _mm512_set1_epi16(0xFF);
  const __m512i lows = _mm512_or_si512(_mm512_and_si512(first, six),
                                       _mm512_slli_epi16(_mm512_and_si512(second, six), 8));
  const __m512i highs = _mm512_or_si512(_mm512_and_si512(_mm512_srai_epi16(first, 6), byte),
                                        _mm512_slli_epi16(_mm512_srai_epi16(second, 6), 8));
  _mm512_store_si512(high, highs);
  _mm512_store_si512(low, lows);
}

// sums[r] (high, low: 16 x 16 int32 each) of row tile r (codes at a + r * tile_stride, rows
// `stride` apart) over one super-block of `codes`. (The tile intrinsics take their tile
// numbers as literals, hence the cases written out.)
template <int kRowTiles>
inline void super_block_sums(const int8_t* a, int64_t tile_stride, int64_t stride,
                             const ScaledCodes& codes, int32_t (*sums)[2][256]) {
  _tile_zero(4);
  _tile_zero(5);
  if constexpr (kRowTiles == 2) {
    _tile_zero(6);
    _tile_zero(7);
  }
  for (int64_t q = 0; q < kRuns; ++q) {
    _tile_loadd(0, a + 64 * q, stride);
    if constexpr (kRowTiles == 2) _tile_loadd(1, a + tile_stride + 64 * q, stride);
    _tile_loadd(2, codes.high[q], 64);
    _tile_loadd(3, codes.low[q], 64);
    _tile_dpbssd(4, 0, 2);
    _tile_dpbsud(5, 0, 3);
    if constexpr (kRowTiles == 2) {
      _tile_dpbssd(6, 1, 2);
      _tile_dpbsud(7, 1, 3);
    }
  }
  _tile_stored(4, sums[0][0], 64);
  _tile_stored(5, sums[0][1], 64);
  if constexpr (kRowTiles == 2) {
    _tile_stored(6, sums[kRowTiles - 1][0], 64);
    _tile_stored(7, sums[kRowTiles - 1][1], 64);
  }
}

// out[row0 .. row0 + rows) for the task's `cols` column tiles, rows in kRowTiles tiles of 16
// (the codes padded to whole tiles), over all super-blocks of `tiles` (supers x cols); each
// row's integer sums of a super-block to float32 by Format::add_row.
template <class Format, int kRowTiles>
inline void tiles_rows(const typename Format::Tile* tiles, int64_t cols, int64_t supers,
                       const QuantizedRows& x, int64_t row0, int64_t rows, float* out, int64_t n) {
  alignas(64) int32_t sums[kRowTiles][2][256];
  for (int64_t s = 0; s < supers; ++s) {
    for (int64_t c = 0; c < cols; ++c) {
      const typename Format::Tile& tile = tiles[s * cols + c];
      super_block_sums<kRowTiles>(x.row_codes(row0) + s * kSuperBlock, kTileRowsInt8 * x.k, x.k,
                                  tile.codes, sums);
      for (int64_t i = 0; i < rows; ++i) {
        const int32_t* high = sums[i / kTileRowsInt8][0] + 16 * (i % kTileRowsInt8);
        const int32_t* low = sums[i / kTileRowsInt8][1] + 16 * (i % kTileRowsInt8);
        const __m512i total =
            _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(high), 6), _mm512_load_si512(low));
        float* o = out + (row0 + i) * n + kTileColumns * c;
        const __m512 acc = s == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(o);
        _mm512_storeu_ps(o, Format::add_row(tile, x, row0 + i, s, total, acc));
      }
    }
  }
}

// out (m, n) for the column tiles [first, last) of a weight in Format's layout, x's codes
// padded with zero rows to a multiple of 16; n a multiple of 16.
template <class Format>
inline void tiles_matmul(const uint8_t* weights, int64_t supers, const QuantizedRows& x, int64_t m,
                         int64_t first, int64_t last, float* out, int64_t n) {
  using Tile = typename Format::Tile;
  auto* tiles = reinterpret_cast<Tile*>(
      scratch(Scratch::kTileCodes, (supers * kColumnTiles * sizeof(Tile) + 64) / sizeof(float)));
  tiles = reinterpret_cast<Tile*>((reinterpret_cast<uintptr_t>(tiles) + 63) & ~uintptr_t{63});
  configure_tiles();
  for (int64_t t0 = first; t0 < last; t0 += kColumnTiles) {
    const int64_t cols = std::min<int64_t>(kColumnTiles, last - t0);
    for (int64_t s = 0; s < supers; ++s)
      for (int64_t c = 0; c < cols; ++c)
        Format::unpack(weights, supers, t0 + c, s, tiles[s * cols + c]);
    float* o = out + kTileColumns * t0;
    for (int64_t row = 0; row < m; row += 2 * kTileRowsInt8) {
      const int64_t rows = std::min<int64_t>(2 * kTileRowsInt8, m - row);
      if (rows > kTileRowsInt8) {
        tiles_rows<Format, 2>(tiles, cols, supers, x, row, rows, o, n);
      } else {
        tiles_rows<Format, 1>(tiles, cols, supers, x, row, rows, o, n);
      }
    }
  }
  _tile_release();
}

}  // namespace astrai
#endif
