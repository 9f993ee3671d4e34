// Q6_K weights times activation rows 16 at a time, in 8-bit integers (AVX-512 VNNI), the
// rows across the vector lanes.
//
// Why: kquant_gemv_q6k.h holds one column's codes in the lanes, so every row loads its
// activations again for each column and pays a multiply by the 16-input scales, and the
// codes' offset of 32, per dot product. From 16 rows on, 16 rows' activations fill a vector
// instead: a column's 4 codes are the dot product's own broadcast operand, each activation
// vector serves 8 columns, and one scale multiply serves 16 rows. The dot product takes its
// activations unsigned, so they are stored plus 128; that adds 128 Σ scale · Σ codes per
// column and super-block, a figure of the weight alone, taken off once. The arithmetic is
// otherwise kquant_gemv.h's (and ggml's). (Woven Q4_K rows measured no faster this way than
// on kquant_gemv.h, whose lanes already hold 8 columns: docs/BENCHMARKS.md.)
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kquant_gemv_q6k.h"

#if defined(ASTRAI_KQUANT_GEMV)
namespace astrai {

constexpr int64_t kTileRows = 16;

// Rows [first, first + 16) of `x` with the rows across the lanes: per 4 inputs a vector of
// 16 rows × 4 codes + 128, per super-block the rows' scales, per 32 inputs the rows' sums of
// each 16 as a pair of 16-bit words.
struct RowTile {
  std::vector<uint8_t> codes;     // (k / 4, 16, 4)
  std::vector<float> scales;      // (k / 256, 16)
  std::vector<int32_t> sixteens;  // (k / 32, 16)

  RowTile(const QuantizedRows& x, int64_t first)
      : codes(x.k * kTileRows), scales(x.k / kSuperBlock * kTileRows), sixteens(x.k / 32 * kTileRows) {
    const int64_t supers = x.k / kSuperBlock;
    for (int64_t r = 0; r < kTileRows; ++r) {
      const int8_t* row = x.row_codes(first + r);
      for (int64_t g = 0; g < x.k / 4; ++g) {
        uint32_t word;
        std::memcpy(&word, row + 4 * g, 4);
        word ^= 0x80808080u;  // each signed byte plus 128, as an unsigned one
        std::memcpy(codes.data() + (g * kTileRows + r) * 4, &word, 4);
      }
      for (int64_t s = 0; s < supers; ++s) scales[s * kTileRows + r] = x.scale(first + r, s);
      const int32_t* sums = x.sums + (first + r) * (x.k / 16);
      for (int64_t i = 0; i < x.k / 32; ++i)  // a sum of 16 codes is at most 16 · 127 in size
        sixteens[i * kTileRows + r] = static_cast<int32_t>(static_cast<uint16_t>(sums[2 * i]) |
                                                           (static_cast<uint32_t>(sums[2 * i + 1]) << 16));
    }
  }
};

// One Q6_K super-block of a column unpacked: its codes in input order, its scales, the scales
// as 16-bit pairs, the offset's share 128 Σ scale · Σ codes, and d.
struct alignas(64) Q6KUnpacked {
  uint8_t codes[kSuperBlock];
  int32_t scale[16], scale_pairs[8], offset;
  float d;

  explicit Q6KUnpacked(const uint8_t* super) {
    const Q6KBlock block(super);
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i total = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      _mm512_store_si512(codes + 64 * j, block.codes[j]);
      total = _mm512_add_epi32(total, _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), block.codes[j], ones), block.scale[j]));
    }
    offset = 128 * _mm512_reduce_add_epi32(total);
    const int8_t* sc = reinterpret_cast<const int8_t*>(super + 192);
    for (int i = 0; i < 16; ++i) scale[i] = sc[i];
    for (int p = 0; p < 8; ++p)
      scale_pairs[p] = static_cast<int32_t>(static_cast<uint16_t>(sc[2 * p]) |
                                            (static_cast<uint32_t>(static_cast<uint16_t>(sc[2 * p + 1])) << 16));
    d = half_to_float(load_u16(super + 208));
  }
};

// Columns multiplied together: each activation vector loaded serves them all.
constexpr int64_t kTileColumns = 8;

inline __m512i broadcast_word(const void* p) {
  int32_t word;
  std::memcpy(&word, p, 4);
  return _mm512_set1_epi32(word);
}

// acc (8 columns × 16 rows, float) += tile × super-block `s` of the 8 columns unpacked in `w`:
// d Σ_i scale_i Σ (code - 32) x per 16 inputs i, as Σ scale · code · (x + 128), less the
// offset's share, less 32 Σ scale · the rows' sums of 16.
inline void q6_k_tile_super(const Q6KUnpacked* w, const RowTile& tile, int64_t s, float* acc) {
  const uint8_t* x = tile.codes.data() + s * kSuperBlock * kTileRows;
  __m512i sum[kTileColumns];
  for (int c = 0; c < kTileColumns; ++c) sum[c] = _mm512_setzero_si512();
  for (int i = 0; i < 16; ++i) {
    __m512i in[4];
    for (int u = 0; u < 4; ++u) in[u] = _mm512_loadu_si512(x + (4 * i + u) * 64);
    for (int c = 0; c < kTileColumns; ++c) {
      __m512i a = _mm512_setzero_si512();
      for (int u = 0; u < 4; ++u) a = _mm512_dpbusd_epi32(a, in[u], broadcast_word(w[c].codes + 16 * i + 4 * u));
      sum[c] = _mm512_add_epi32(sum[c], _mm512_mullo_epi32(a, _mm512_set1_epi32(w[c].scale[i])));
    }
  }
  const __m512 xs = _mm512_loadu_ps(tile.scales.data() + s * kTileRows);
  __m512i sixteens[8];
  for (int p = 0; p < 8; ++p) sixteens[p] = _mm512_loadu_si512(tile.sixteens.data() + (8 * s + p) * kTileRows);
  for (int c = 0; c < kTileColumns; ++c) {
    __m512i m = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) m = _mm512_dpwssd_epi32(m, sixteens[p], _mm512_set1_epi32(w[c].scale_pairs[p]));
    const __m512i exact =
        _mm512_sub_epi32(_mm512_sub_epi32(sum[c], _mm512_set1_epi32(w[c].offset)), _mm512_slli_epi32(m, 5));
    float* column = acc + c * kTileRows;
    _mm512_storeu_ps(column, _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), _mm512_mul_ps(xs, _mm512_set1_ps(w[c].d)),
                                             _mm512_loadu_ps(column)));
  }
}

// out rows [16 t, 16 t + 16) for each tile t, for the columns of [first, last) that make
// whole runs of 8 from `first`; returns where those end.
inline int64_t q6_k_tile_columns(const uint8_t* weights, int64_t supers, const std::vector<RowTile>& tiles,
                                 int64_t first, int64_t last, float* out, int64_t n) {
  const int64_t count = static_cast<int64_t>(tiles.size());
  std::vector<float> acc(count * kTileColumns * kTileRows);
  std::vector<Q6KUnpacked> unpacked;
  unpacked.reserve(kTileColumns);
  int64_t c0 = first;
  for (; c0 + kTileColumns <= last; c0 += kTileColumns) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t s = 0; s < supers; ++s) {
      unpacked.clear();
      for (int64_t c = 0; c < kTileColumns; ++c) unpacked.emplace_back(weights + ((c0 + c) * supers + s) * kQ6KBytes);
      for (int64_t t = 0; t < count; ++t)
        q6_k_tile_super(unpacked.data(), tiles[t], s, acc.data() + t * kTileColumns * kTileRows);
    }
    for (int64_t t = 0; t < count; ++t)
      for (int64_t c = 0; c < kTileColumns; ++c)
        for (int64_t r = 0; r < kTileRows; ++r)
          out[(t * kTileRows + r) * n + c0 + c] = acc[(t * kTileColumns + c) * kTileRows + r];
  }
  return c0;
}

}  // namespace astrai
#endif
