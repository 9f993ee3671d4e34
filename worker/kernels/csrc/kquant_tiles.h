// The 8-bit K-quant gemv's arithmetic (kquant_gemv.h) on the tile unit (AMX-INT8), for woven
// Q4_K and Q5_K weights times many rows.
//
// Why: from a few rows on the gemv is bound by its instructions: each vpdpbusd's 64
// multiply-adds come with a broadcast of the row's activations and a share of the scales'
// work. One tile product here is 16 rows x 16 columns x 64 inputs, 16,384 multiply-adds.
//
// How the sub-block scales stay exact: ggml sums, per super-block, scale_b x (codes . x) over
// its 8 sub-blocks in integers. Each code times its sub-block's 6-bit scale (at most 31 x 63)
// is split as 64 high + low, both bytes; the tiles sum x . high and x . low over the whole
// super-block, and 64 high + low is ggml's integer sum. So a super-block's products stay in
// the tiles, leaving them once for the float32 d and dmin, where a tile store per sub-block
// (its reload waits on the store) cost four times the product.
//
// Layout: the A tiles are the activation rows' codes as they lie (16 rows x 64 bytes, the
// rows' stride apart); a B tile holds one 64-input run of two woven groups (16 columns): its
// row p, each column's inputs 4p .. 4p + 3 (rows 0-7 the run's low nibbles, its first
// sub-block; 8-15 the high ones), which are dword 2j + p % 2 of the woven run j
// (kquant_gemv_zmm.h), so one dword permute of two groups' codes makes a row. A task's
// columns are unpacked once and serve all its rows.
#pragma once

#include <cstdint>

#include "activations.h"
#include "amx_panel_kernel.h"
#include "kquant_gemv.h"
#include "kquant_q5k_woven.h"
#include "row_runs.h"

#if defined(ASTRAI_AMX) && defined(__AMX_INT8__) && defined(ASTRAI_KQUANT_GEMV_ZMM)
#define ASTRAI_KQUANT_TILES 1
namespace astrai {

constexpr int64_t kTileRowsInt8 = 16;  // activation rows per A tile
constexpr int64_t kTileColumns = 16;   // output columns per B tile: two woven groups
constexpr int64_t kRuns = 4;           // 64-input runs per super-block
constexpr int64_t kColumnTiles = 2;    // per task: 32 columns

// Tiles 0-1: two row tiles' codes of one run; 2-3: a column tile's high and low parts of it;
// 4-7: the sums (row tile 0 high, low; row tile 1 high, low). All 16 rows of 64 bytes.
inline void configure_int8_tiles() {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t bytes_per_row[16] = {};
    uint8_t rows[16] = {};
  } config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

// One super-block of one column tile, unpacked: each run's scaled codes as two B tiles (high
// and low parts), the minimums of sub-blocks 2p and 2p + 1 as 16-bit pairs, d and dmin.
struct ColumnTile {
  alignas(64) uint8_t high[kRuns][1024];
  alignas(64) uint8_t low[kRuns][1024];
  __m512i min_pair[4];
  __m512 d, dmin;
};

inline __m512 halves16(const uint8_t* left, const uint8_t* right) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(left));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(right));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
}

inline __m512i bytes16(uint64_t left, uint64_t right) {
  return _mm512_cvtepu8_epi32(
      _mm_set_epi64x(static_cast<int64_t>(right), static_cast<int64_t>(left)));
}

// A B-tile row of codes (16 columns x 4) times its columns' scales (`scale`: byte 0 of dword
// n column n's), split into 64 high + low, into the high and low tiles.
inline void store_scaled(__m512i codes, __m512i scale, uint8_t* high, uint8_t* low) {
  const __m512i even = _mm512_or_si512(scale, _mm512_slli_epi32(scale, 16));  // (s, 0, s, 0)
  const __m512i odd = _mm512_slli_epi32(even, 8);                             // (0, s, 0, s)
  const __m512i first = _mm512_maddubs_epi16(codes, even),
                second = _mm512_maddubs_epi16(codes, odd);
  const __m512i six = _mm512_set1_epi16(63);
  const __m512i lows = _mm512_or_si512(_mm512_and_si512(first, six),
                                       _mm512_slli_epi16(_mm512_and_si512(second, six), 8));
  const __m512i highs = _mm512_or_si512(_mm512_srli_epi16(first, 6),
                                        _mm512_slli_epi16(_mm512_srli_epi16(second, 6), 8));
  _mm512_store_si512(high, highs);
  _mm512_store_si512(low, lows);
}

// Super-blocks `left` and `right` (woven groups 2t and 2t + 1) → `tile`.
template <bool kFive>
inline void unpack_column_tile(const uint8_t* left, const uint8_t* right, ColumnTile& tile) {
  alignas(64) uint64_t sc[2][8], mn[2][8];
  q4_k_scale_bytes(left, sc[0], mn[0]);
  q4_k_scale_bytes(right, sc[1], mn[1]);
  for (int p = 0; p < 4; ++p)
    tile.min_pair[p] =
        _mm512_or_si512(bytes16(mn[0][2 * p], mn[1][2 * p]),
                        _mm512_slli_epi32(bytes16(mn[0][2 * p + 1], mn[1][2 * p + 1]), 16));
  tile.d = halves16(left, right);
  tile.dmin = halves16(left + 16, right + 16);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t q = 0; q < kRuns; ++q) {  // sub-blocks 2q (low nibbles) and 2q + 1 (high)
    const __m512i scale[2] = {bytes16(sc[0][2 * q], sc[1][2 * q]),
                              bytes16(sc[0][2 * q + 1], sc[1][2 * q + 1])};
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
        store_scaled(_mm512_permutex2var_epi32(codes[0][h], even, codes[1][h]), scale[h],
                     tile.high[q] + row, tile.low[q] + row);
        store_scaled(_mm512_permutex2var_epi32(codes[0][h], odd, codes[1][h]), scale[h],
                     tile.high[q] + row + 64, tile.low[q] + row + 64);
      }
    });
  }
}

// sums[r] (high, low: 16 x 16 int32 each) of row tile r (codes at a + r * tile_stride, rows
// `stride` apart) over one super-block of `column`. (The tile intrinsics take their tile
// numbers as literals, hence the cases written out.)
template <int kRowTiles>
inline void super_block_sums(const int8_t* a, int64_t tile_stride, int64_t stride,
                             const ColumnTile& column, int32_t (*sums)[2][256]) {
  _tile_zero(4);
  _tile_zero(5);
  if constexpr (kRowTiles == 2) {
    _tile_zero(6);
    _tile_zero(7);
  }
  for (int64_t q = 0; q < kRuns; ++q) {
    _tile_loadd(0, a + 64 * q, stride);
    if constexpr (kRowTiles == 2) _tile_loadd(1, a + tile_stride + 64 * q, stride);
    _tile_loadd(2, column.high[q], 64);
    _tile_loadd(3, column.low[q], 64);
    _tile_dpbsud(4, 0, 2);
    _tile_dpbsud(5, 0, 3);
    if constexpr (kRowTiles == 2) {
      _tile_dpbsud(6, 1, 2);
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
// (the codes padded to whole tiles), over all super-blocks of `tiles` (supers x cols).
template <int kRowTiles>
inline void tiles_rows(const ColumnTile* tiles, int64_t cols, int64_t supers,
                       const QuantizedRows& x, int64_t row0, int64_t rows, float* out, int64_t n) {
  alignas(64) int32_t sums[kRowTiles][2][256];
  for (int64_t s = 0; s < supers; ++s) {
    for (int64_t c = 0; c < cols; ++c) {
      const ColumnTile& column = tiles[s * cols + c];
      super_block_sums<kRowTiles>(x.row_codes(row0) + s * kSuperBlock, kTileRowsInt8 * x.k, x.k,
                                  column, sums);
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t row = row0 + i;
        const int32_t* high = sums[i / kTileRowsInt8][0] + 16 * (i % kTileRowsInt8);
        const int32_t* low = sums[i / kTileRowsInt8][1] + 16 * (i % kTileRowsInt8);
        const __m512i total =
            _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(high), 6), _mm512_load_si512(low));
        const __m512 xs = _mm512_set1_ps(x.scale(row, s));
        const int32_t* pairs = x.row_pair_sums(row, s);
        __m512i m = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p)
          m = _mm512_dpwssd_epi32(m, column.min_pair[p], _mm512_set1_epi32(pairs[p]));
        float* o = out + row * n + kTileColumns * c;
        __m512 acc = s == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(o);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(column.d, xs), acc);
        acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(column.dmin, xs), acc);
        _mm512_storeu_ps(o, acc);
      }
    }
  }
}

// out (m, n) for the column tiles [first, last) of a woven Q4_K (Q5_K where kFive) weight,
// x's codes padded with zero rows to a multiple of 16. n a multiple of 16.
template <bool kFive>
inline void tiles_matmul(const uint8_t* weights, int64_t supers, const QuantizedRows& x, int64_t m,
                         int64_t first, int64_t last, float* out, int64_t n) {
  constexpr int64_t kBytes = kFive ? kQ5KWovenBytes : kQ4KWovenBytes;
  auto* tiles = reinterpret_cast<ColumnTile*>(scratch(
      Scratch::kTileCodes, (supers * kColumnTiles * sizeof(ColumnTile) + 64) / sizeof(float)));
  tiles = reinterpret_cast<ColumnTile*>((reinterpret_cast<uintptr_t>(tiles) + 63) & ~uintptr_t{63});
  configure_int8_tiles();
  for (int64_t t0 = first; t0 < last; t0 += kColumnTiles) {
    const int64_t cols = std::min<int64_t>(kColumnTiles, last - t0);
    for (int64_t s = 0; s < supers; ++s) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t* left = weights + ((2 * (t0 + c)) * supers + s) * kBytes;
        const uint8_t* right = weights + ((2 * (t0 + c) + 1) * supers + s) * kBytes;
        unpack_column_tile<kFive>(left, right, tiles[s * cols + c]);
      }
    }
    float* o = out + kTileColumns * t0;
    for (int64_t row = 0; row < m; row += 2 * kTileRowsInt8) {
      const int64_t rows = std::min<int64_t>(2 * kTileRowsInt8, m - row);
      if (rows > kTileRowsInt8) {
        tiles_rows<2>(tiles, cols, supers, x, row, rows, o, n);
      } else {
        tiles_rows<1>(tiles, cols, supers, x, row, rows, o, n);
      }
    }
  }
  _tile_release();
}

}  // namespace astrai
#endif
