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
// Layout (woven Q4_K and Q5_K; Q6_K swaps the roles, see its header): the A tiles are the
// activation rows' codes, copied once per matmul so that each tile's 16 rows x 64 bytes lie
// in one kilobyte (TiledCodes); a B tile holds one 64-input run of 16 columns, its row p each
// column's inputs 4p .. 4p + 3 (the tile unit's layout). A task's two column tiles are
// unpacked per super-block and serve all its rows, up to 32 while the unpacked codes are in
// L1; each row's sums over both column tiles become float32 together (Format::Columns), the
// row's broadcasts shared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

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

// The tiles as amx_panel_kernel.h's configure_tiles sets them, all 16 rows of 64 bytes: 0-3
// one run's operands (super_block_sums), 4-7 the sums (row tile 0 high, low; 1 high, low).

// One super-block of a column tile's scaled codes, per run the B tiles of the high and low
// parts.
struct ScaledCodes {
  alignas(64) uint8_t high[kRuns][1024];
  alignas(64) uint8_t low[kRuns][1024];
};

// A column's scale (byte 0 of each dword, as a signed byte; the others 0) placed for
// vpmaddubsw: `even` multiplies bytes 0 and 2 of each dword, `odd` bytes 1 and 3.
struct ByteScales {
  __m512i even, odd;

  explicit ByteScales(__m512i scale)
      : even(_mm512_or_si512(scale, _mm512_slli_epi32(scale, 16))),
        odd(_mm512_slli_epi32(even, 8)) {}
};

// A B-tile row of codes (16 columns x 4, unsigned) times its columns' scales, less `offset`
// (16-bit words: each column's offset x scale, in both of its dword's words; Q6_K's codes are
// stored plus 32), split into 64 high + low, into the high and low tiles' rows.
inline void store_scaled(__m512i codes, const ByteScales& scale, __m512i offset, uint8_t* high,
                         uint8_t* low) {
  // Words: the products of the even bytes, of the odd ones.
  const __m512i first = _mm512_sub_epi16(_mm512_maddubs_epi16(codes, scale.even), offset);
  const __m512i second = _mm512_sub_epi16(_mm512_maddubs_epi16(codes, scale.odd), offset);
  // Per word, the low byte from `first`'s, the high byte from `second`'s (0xE4: c ? a : b).
  const __m512i low_byte = _mm512_set1_epi16(0x00FF);
  const __m512i highs = _mm512_ternarylogic_epi32(_mm512_srai_epi16(first, 6),
                                                  _mm512_slli_epi16(second, 2), low_byte, 0xE4);
  const __m512i bytes =
      _mm512_ternarylogic_epi32(first, _mm512_slli_epi16(second, 8), low_byte, 0xE4);
  _mm512_store_si512(high, highs);
  _mm512_store_si512(low, _mm512_and_si512(bytes, _mm512_set1_epi8(63)));
}

// The activation rows' codes in the A tiles' order, each tile's 16 rows x 64 bytes one
// contiguous kilobyte (lines the hardware prefetchers follow): [row tile][super-block][run].
struct TiledCodes {
  int8_t* data;
  int64_t supers;

  const int8_t* at(int64_t row_tile, int64_t s) const {
    return data + (row_tile * supers + s) * kRuns * 1024;
  }

  // Tiles [first, last) of the (row tile, super-block) pairs from x's codes (padded with
  // zero rows to whole row tiles): as A tiles, or where `grouped_columns` as B tiles for
  // grouped Q6_K weights (kquant_tiles_q6k.h: tile (t, s, run j) row l holds dword i = row
  // 16 t + i's inputs 16 l + 4 j .. + 3 of super-block s).
  void fill(const QuantizedRows& x, int64_t first, int64_t last, bool grouped_columns) const {
    for (int64_t pair = first; pair < last; ++pair) {
      const int64_t t = pair / supers, s = pair % supers;
      int8_t* tiles = data + pair * kRuns * 1024;
      for (int64_t i = 0; i < kTileRowsInt8; ++i) {
        const int8_t* row = x.row_codes(kTileRowsInt8 * t + i) + s * kSuperBlock;
        if (!grouped_columns) {
          for (int64_t q = 0; q < kRuns; ++q)
            std::memcpy(tiles + 1024 * q + 64 * i, row + 64 * q, 64);
          continue;
        }
        for (int64_t l = 0; l < 16; ++l)
          for (int64_t j = 0; j < kRuns; ++j)
            std::memcpy(tiles + 1024 * j + 64 * l + 4 * i, row + 16 * l + 4 * j, 4);
      }
    }
  }
};

// sums[r] (high, low: 16 x 16 int32 each) of activation row tile r (its tiles at a + r *
// tile_stride, a run's 1 KB apart) over one super-block of `codes`: (activation row, column)
// with the activations as A tiles, (weight row, activation row) with the weights as A tiles
// (kWeightsInA, the activations then in B order). (The tile intrinsics take their tile numbers
// as literals, hence the cases written out.)
template <int kRowTiles, bool kWeightsInA = false>
inline void super_block_sums(const int8_t* a, int64_t tile_stride, const ScaledCodes& codes,
                             int32_t (*sums)[2][256]) {
  _tile_zero(4);
  _tile_zero(5);
  if constexpr (kRowTiles == 2) {
    _tile_zero(6);
    _tile_zero(7);
  }
  for (int64_t q = 0; q < kRuns; ++q) {
    if constexpr (kWeightsInA) {
      // 0-1 the weights' high and low parts, 2-3 two row tiles of activations.
      _tile_loadd(0, codes.high[q], 64);
      _tile_loadd(1, codes.low[q], 64);
      _tile_loadd(2, a + 1024 * q, 64);
      if constexpr (kRowTiles == 2) _tile_loadd(3, a + tile_stride + 1024 * q, 64);
      _tile_dpbssd(4, 0, 2);
      _tile_dpbusd(5, 1, 2);
      if constexpr (kRowTiles == 2) {
        _tile_dpbssd(6, 0, 3);
        _tile_dpbusd(7, 1, 3);
      }
    } else {
      // 0-1 two row tiles of activations, 2-3 the weights' high and low parts.
      _tile_loadd(0, a + 1024 * q, 64);
      if constexpr (kRowTiles == 2) _tile_loadd(1, a + tile_stride + 1024 * q, 64);
      _tile_loadd(2, codes.high[q], 64);
      _tile_loadd(3, codes.low[q], 64);
      _tile_dpbssd(4, 0, 2);
      _tile_dpbsud(5, 0, 3);
      if constexpr (kRowTiles == 2) {
        _tile_dpbssd(6, 1, 2);
        _tile_dpbsud(7, 1, 3);
      }
    }
  }
  _tile_stored(4, sums[0][0], 64);
  _tile_stored(5, sums[0][1], 64);
  if constexpr (kRowTiles == 2) {
    _tile_stored(6, sums[kRowTiles - 1][0], 64);
    _tile_stored(7, sums[kRowTiles - 1][1], 64);
  }
}

// Rows [row0, row0 + rows) of super-block s to float32: for each row, Format::Columns adds
// its integer sums (64 high + low) over the kCols column tiles to out.
template <class Format, int kCols, int kRowTiles>
inline void add_super_block(const typename Format::Tile* tiles, const int32_t (*sums)[2][2][256],
                            const QuantizedRows& x, int64_t s, int64_t row0, int64_t rows,
                            float* out, int64_t n) {
  const typename Format::template Columns<kCols> columns(tiles);
  for (int64_t i = 0; i < rows; ++i) {
    __m512i total[kCols];
    for (int c = 0; c < kCols; ++c) {
      const int32_t* high = sums[c][i / kTileRowsInt8][0] + 16 * (i % kTileRowsInt8);
      const int32_t* low = sums[c][i / kTileRowsInt8][1] + 16 * (i % kTileRowsInt8);
      total[c] =
          _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(high), 6), _mm512_load_si512(low));
    }
    columns.add_row(x, row0 + i, s, total, out + (row0 + i) * n, s == 0);
  }
}

// out[row0 .. row0 + rows) for the task's `cols` column tiles (`tiles`, super-block s's),
// rows in kRowTiles tiles of 16 from `codes`.
template <class Format, int kRowTiles>
inline void super_block_rows(const typename Format::Tile* tiles, int64_t cols, int64_t s,
                             const QuantizedRows& x, const TiledCodes& codes, int64_t row0,
                             int64_t rows, float* out, int64_t n) {
  alignas(64) int32_t sums[kColumnTiles][2][2][256];
  const int8_t* a = codes.at(row0 / kTileRowsInt8, s);
  for (int64_t c = 0; c < cols; ++c)
    super_block_sums<kRowTiles>(a, codes.supers * kRuns * 1024, tiles[c].codes, sums[c]);
  if (cols == kColumnTiles) {
    add_super_block<Format, kColumnTiles, kRowTiles>(tiles, sums, x, s, row0, rows, out, n);
  } else {
    add_super_block<Format, 1, kRowTiles>(tiles, sums, x, s, row0, rows, out, n);
  }
}

template <class Format>
inline void rows_of_super_block(const typename Format::Tile* tiles, int64_t cols, int64_t s,
                                const QuantizedRows& x, const TiledCodes& codes, int64_t m,
                                float* out, int64_t n) {
  for (int64_t row = 0; row < m; row += 2 * kTileRowsInt8) {
    const int64_t rows = std::min<int64_t>(2 * kTileRowsInt8, m - row);
    if (rows > kTileRowsInt8) {
      super_block_rows<Format, 2>(tiles, cols, s, x, codes, row, rows, out, n);
    } else {
      super_block_rows<Format, 1>(tiles, cols, s, x, codes, row, rows, out, n);
    }
  }
}

// out (m, n) for the column tiles [first, last) of a weight in Format's layout, x's codes
// tiled (TiledCodes); n a multiple of 16. Up to 32 rows each super-block's unpacked columns
// serve the rows while they are in L1; beyond, the task's columns are unpacked once for
// every pass over the rows.
template <class Format>
inline void tiles_matmul(const uint8_t* weights, int64_t supers, const QuantizedRows& x,
                         const TiledCodes& codes, int64_t m, int64_t first, int64_t last,
                         float* out, int64_t n) {
  using Tile = typename Format::Tile;
  const bool one_pass = m <= 2 * kTileRowsInt8;
  const int64_t held = one_pass ? 1 : supers;
  auto* tiles = reinterpret_cast<Tile*>(
      scratch(Scratch::kTileCodes, (held * kColumnTiles * sizeof(Tile) + 64) / sizeof(float)));
  tiles = reinterpret_cast<Tile*>((reinterpret_cast<uintptr_t>(tiles) + 63) & ~uintptr_t{63});
  configure_tiles();
  for (int64_t t0 = first; t0 < last; t0 += kColumnTiles) {
    const int64_t cols = std::min<int64_t>(kColumnTiles, last - t0);
    float* o = out + kTileColumns * t0;
    if (one_pass) {
      for (int64_t s = 0; s < supers; ++s) {
        for (int64_t c = 0; c < cols; ++c) Format::unpack(weights, supers, t0 + c, s, tiles[c]);
        rows_of_super_block<Format>(tiles, cols, s, x, codes, m, o, n);
      }
      continue;
    }
    for (int64_t s = 0; s < supers; ++s)
      for (int64_t c = 0; c < cols; ++c)
        Format::unpack(weights, supers, t0 + c, s, tiles[s * cols + c]);
    for (int64_t s = 0; s < supers; ++s)
      rows_of_super_block<Format>(tiles + s * cols, cols, s, x, codes, m, o, n);
  }
  _tile_release();
}

}  // namespace astrai
#endif
