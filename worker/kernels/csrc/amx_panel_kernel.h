// The panel kernel on AMX (Intel's tile matrix unit), for Q4_1 and Q8_0 weights: float32
// results from bf16 tiles, the weights exact and each activation to 16 significant bits.
//
// How: a bf16 tile product rounds nothing but its inputs, so the weights go in as their codes
// (Q4_1 0..15, Q8_0 -127..127: exact in bf16) and each block's scale d (and Q4_1's minimum
// m) is applied afterwards in float32, as the direct kernel does:
// out = sum_b d_b * (x . codes_b) + m_b * sum_b(x). Each activation is split into two bf16
// parts, hi + lo, which together hold 16 of its 24 significant bits (rounded to nearest:
// off by at most 2^-17 of it); the tile unit multiplies each part by the codes exactly and
// sums in float32. A plain bf16 matmul (the activations rounded to 8 bits) cut the float32
// model's top-1 agreement; with two parts the default model's logits stay within 1.2e-3 of
// float32's (of ~41) and its top-1 agreement at 100%. A third part (all 24 bits, 9e-5) cost
// 17% more time at 256 rows (docs/bench/HISTORY.md, "What changed, each measured (seventh
// session of 2026-12-01, same Xeon)").
//
// Why it pays: one tile product is 16 x 16 x 32 multiply-adds in ~16 cycles, 16 times the FMA
// units' rate on the same core, so two of them plus the float32 scaling per block still
// leave the float32 panel kernel far behind (measured in docs/bench/HISTORY.md, "The block
// matmuls on AMX tiles (fifth session of 2026-12-01, same Xeon)").
//
// Compiled in where -march=native has AMX-TILE, AMX-BF16 and AVX512-BF16; used once Linux has
// granted this process the tile state (amx_ready).
#pragma once

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && \
    defined(__AVX512BW__)
#define ASTRAI_AMX 1

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "activations.h"
#include "block_format.h"
#include "panel_kernel.h"
#include "parallel.h"

namespace astrai {

constexpr int64_t kAmxRows = 16;                      // activation rows per tile
constexpr int64_t kAmxHalf = 2 * kTile;               // output columns per tile: two records
constexpr int64_t kAmxMaxQuads = 4;                   // per call of amx_columns: 128 columns
constexpr int64_t kAmxParts = 2;                      // bf16 parts per activation
constexpr int64_t kAmxTileWords = kAmxRows * kBlock;  // 512 bf16, 1 KB

// Linux hands a process the tile registers' 8 KB of state only when it asks (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile instruction faults.
inline bool amx_ready() {
  static const bool ready = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return ready;
}

// Eight tiles of 16 rows by 64 bytes: 0-1 one part of two row tiles' activations, 2-3 the
// codes of two 16-column halves, 4-7 their four products. The configuration is per thread.
inline void configure_tiles() {
  struct alignas(64) {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t bytes_per_row[16] = {};
    uint8_t rows[16] = {};
  } config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = kAmxRows;
  }
  _tile_loadconfig(&config);
}

inline __m512 bf16_to_float(__m256i words) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(words), 16));
}

// x (m, k) split for the tiles: for each 16-row tile t and block b, the parts as kAmxParts
// A tiles (row r: the block's 32 inputs of row 16 t + r), and sums[(t, b), r] the block's
// inputs summed in order (the minimum's factor). Rows past m, to a whole pair of tiles, are
// zeros.
struct SplitRows {
  const uint16_t* parts;  // (row tiles, blocks, kAmxParts, 16, 32)
  const float* sums;      // (row tiles, blocks, 16)
};

// with_sums: Q4_1 needs each block's sum for its minimum; Q8_0 has none.
inline SplitRows split_rows(const float* x, int64_t m, int64_t k, bool with_sums) {
  // Row tiles in pairs (amx_columns takes two at a time), the last padded with zeros.
  const int64_t blocks = k / kBlock, row_tiles = 2 * ((m + 2 * kAmxRows - 1) / (2 * kAmxRows));
  auto* parts = reinterpret_cast<uint16_t*>(
      scratch(Scratch::kSplitParts, row_tiles * blocks * kAmxParts * kAmxTileWords / 2));
  float* sums = scratch(Scratch::kSplitSums, row_tiles * blocks * kAmxRows);
  parallel_chunks(row_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t b = 0; b < blocks; ++b) {
        uint16_t* tile = parts + (t * blocks + b) * kAmxParts * kAmxTileWords;
        float* sum = sums + (t * blocks + b) * kAmxRows;
        for (int64_t r = 0; r < kAmxRows; ++r) {
          const int64_t row = t * kAmxRows + r;
          uint16_t* words = tile + r * kBlock;
          if (row >= m) {
            for (int64_t p = 0; p < kAmxParts; ++p) std::memset(words + p * kAmxTileWords, 0, 64);
            sum[r] = 0.0f;
            continue;
          }
          const float* src = x + row * k + b * kBlock;
          if (with_sums) {
            float total = 0.0f;
            for (int64_t i = 0; i < kBlock; ++i) total += src[i];
            sum[r] = total;
          }
          __m512 low = _mm512_loadu_ps(src), high = _mm512_loadu_ps(src + 16);
          for (int64_t p = 0; p < kAmxParts; ++p) {
            // Rounded to nearest, so what is left has at most 16 significant bits.
            const __m512i part = (__m512i)_mm512_cvtne2ps_pbh(high, low);
            _mm512_storeu_si512(words + p * kAmxTileWords, part);
            low = _mm512_sub_ps(low, bf16_to_float(_mm512_castsi512_si256(part)));
            high = _mm512_sub_ps(high, bf16_to_float(_mm512_extracti64x4_epi64(part, 1)));
          }
        }
      }
    }
  });
  return {parts, sums};
}

// The constants of convert_q4_1: a lookup of bf16(0..15), and the byte moves that spread a
// column word's pair of codes over two words. pshufb works within 16-byte lanes: the pair of
// column word q (0..3 in its lane) is bytes 4 q + (0, 1), or 4 q + (2, 3); 0x80 zeroes a byte.
struct CodeSpread {
  __m512i table, first, second;

  CodeSpread() {
    alignas(64) uint16_t values[32] = {};
    for (int v = 0; v < 16; ++v) {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      values[v] = static_cast<uint16_t>(bits >> 16);  // bf16: a float's top half
    }
    alignas(64) uint32_t pairs[2][16];
    for (int e = 0; e < 16; ++e) {
      const uint32_t q = 4 * (e % 4);
      pairs[0][e] = 0x80008000u | q | (q + 1) << 16;
      pairs[1][e] = 0x80008000u | (q + 2) | (q + 3) << 16;
    }
    table = _mm512_load_si512(values);
    first = _mm512_load_si512(pairs[0]);
    second = _mm512_load_si512(pairs[1]);
  }
};

// One block of two Q4_1 records (16 columns) as a B tile, codes in bf16: row p holds inputs
// 2p and 2p + 1 of each column, interleaved (the tile unit's pair layout); then the columns'
// d and m as floats.
inline void convert_q4_1(const CodeSpread& spread, const uint8_t* left, const uint8_t* right,
                         uint16_t* tile, float* scales) {
  const __m512i nibbles = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    const __m512i group = _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(left + 32 + 32 * j))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(right + 32 + 32 * j)), 1);
    const __m512i low = _mm512_and_si512(group, nibbles);                         // inputs 4j + t
    const __m512i high = _mm512_and_si512(_mm512_srli_epi32(group, 4), nibbles);  // 16 + 4j + t
    const __m512i rows[4] = {low, low, high, high};
    const int row_of[4] = {2 * j, 2 * j + 1, 8 + 2 * j, 9 + 2 * j};
    for (int q = 0; q < 4; ++q) {
      const __m512i codes = _mm512_shuffle_epi8(rows[q], q % 2 == 0 ? spread.first : spread.second);
      _mm512_storeu_si512(tile + row_of[q] * kBlock, _mm512_permutexvar_epi16(codes, spread.table));
    }
  }
  _mm256_storeu_ps(scales, load_halves(left));
  _mm256_storeu_ps(scales + 8, load_halves(right));
  _mm256_storeu_ps(scales + 16, load_halves(left + 16));
  _mm256_storeu_ps(scales + 24, load_halves(right + 16));
}

// The same for two Q8_0 records: codes -127..127 (exact in bf16), then the columns' d.
inline void convert_q8_0(const uint8_t* left, const uint8_t* right, uint16_t* tile, float* scales) {
  // Within each 32-bit column word, bytes (0, 1) or (2, 3) to the high bytes of its two
  // words (0x80 zeroes the low ones); an arithmetic shift then sign-extends them.
  const __m512i first = _mm512_set1_epi32(static_cast<int>(0x01800080u));
  const __m512i second = _mm512_set1_epi32(static_cast<int>(0x03800280u));
  alignas(64) uint32_t lane_offsets[16];
  for (int e = 0; e < 16; ++e) lane_offsets[e] = 0x04000400u * (e % 4);  // 4 q in bytes 1, 3
  const __m512i offsets = _mm512_load_si512(lane_offsets);
  const __m512i spread[2] = {_mm512_add_epi8(first, offsets), _mm512_add_epi8(second, offsets)};
  for (int g = 0; g < 8; ++g) {
    const __m512i group = _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(left + 16 + 32 * g))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(right + 16 + 32 * g)), 1);
    for (int half = 0; half < 2; ++half) {  // row 2g + half: inputs 4g + 2 half, + 1
      const __m512i words = _mm512_srai_epi16(_mm512_shuffle_epi8(group, spread[half]), 8);
      const __m512 low = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(words)));
      const __m512 high =
          _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(words, 1)));
      _mm512_storeu_si512(tile + (2 * g + half) * kBlock, (__m512i)_mm512_cvtne2ps_pbh(high, low));
    }
  }
  _mm256_storeu_ps(scales, load_halves(left));
  _mm256_storeu_ps(scales + 8, load_halves(right));
  _mm256_storeu_ps(scales + 16, _mm256_setzero_ps());
  _mm256_storeu_ps(scales + 24, _mm256_setzero_ps());
}

// to[i, 0 .. 16] = from[i, 0 .. 16] (zero where from is null) + products * d (+ sums * m where
// the format has minimums), for rows i < rows: one block's 16 x 16 tile, scaled. The first block
// starts from zero and the last writes the output rows, so the sums never pass through a zeroing or
// a copy of their own (5% of a 256-token prefill, profiled).
template <bool kHasMin>
inline void scale_products(const float* products, const float* scales, const float* sums,
                           const float* from, int64_t from_stride, float* to, int64_t to_stride,
                           int64_t rows) {
  const __m512 d = _mm512_loadu_ps(scales), m = _mm512_loadu_ps(scales + 16);
#pragma GCC unroll 16
  for (int64_t i = 0; i < kAmxRows; ++i) {
    if (i >= rows) break;
    __m512 start = from == nullptr ? _mm512_setzero_ps() : _mm512_loadu_ps(from + i * from_stride);
    if constexpr (kHasMin) start = _mm512_fmadd_ps(_mm512_set1_ps(sums[i]), m, start);
    _mm512_storeu_ps(to + i * to_stride,
                     _mm512_fmadd_ps(_mm512_load_ps(products + i * kAmxHalf), d, start));
  }
}

// Blocks of two records (16 columns) as a B tile and their scales, for amx_columns.
template <bool kQ8>
inline void convert_pair(const RecordSource<kQ8>& source, int64_t tile, int64_t block,
                         uint16_t* codes, float* scales) {
  static const CodeSpread spread;
  const uint8_t* left = source.record(tile, block);
  const uint8_t* right = source.record(tile + 1, block);
  if constexpr (kQ8) {
    convert_q8_0(left, right, codes, scales);
  } else {
    convert_q4_1(spread, left, right, codes, scales);
  }
}

// Columns [32 quad0, 32 (quad0 + quads)) (quads of four records, at most kAmxMaxQuads) for
// rows [row0, row0 + count) (row0 a multiple of 32) of the split activations:
// out(r, c) = sum over blocks of d * (x . codes) + m * sum(x).
//
// Why this shape: the tile unit's products take ~16 cycles each but ~50 to finish, and every
// block's sums leave the tiles to be scaled. Two row tiles by two 16-column halves are four
// independent sums, 8 products a block, which hide that latency, and each loaded tile
// serves two products. Each row pair's parts are loaded once per block and quad, from L1
// after the first quad; the codes of all blocks of the quads stay in L2.
template <class Source>
void amx_columns(const Source& source, int64_t blocks, int64_t quad0, int64_t quads,
                 const SplitRows& x, int64_t row0, int64_t count, int64_t m, float* out,
                 int64_t out_stride) {
  const int64_t halves = 2 * quads;
  auto* codes =
      reinterpret_cast<uint16_t*>(scratch(Scratch::kAmxPanel, blocks * halves * kAmxTileWords / 2));
  float* scales = scratch(Scratch::kAmxScales, blocks * halves * 2 * kAmxHalf);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t h = 0; h < halves; ++h) {
      const int64_t at = b * halves + h;
      convert_pair(source, 2 * (2 * quad0 + h), b, codes + at * kAmxTileWords,
                   scales + at * 2 * kAmxHalf);
    }
  }
  configure_tiles();
  const int64_t width = halves * kAmxHalf;
  alignas(64) float acc[2 * kAmxRows * kAmxMaxQuads * 2 * kAmxHalf];
  alignas(64) float products[4][kAmxRows * kAmxHalf];
  for (int64_t r = row0; r < row0 + count; r += 2 * kAmxRows) {
    const int64_t t = r / kAmxRows;
    const bool lone = m - r <= kAmxRows;  // the pair's second tile is all padding
    const int64_t top_rows = std::min(kAmxRows, m - r);
    const int64_t bottom_rows = std::clamp<int64_t>(m - r - kAmxRows, 0, kAmxRows);
    float* o = out + r * out_stride + quad0 * 2 * kAmxHalf;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint16_t* top = x.parts + (t * blocks + b) * kAmxParts * kAmxTileWords;
      const uint16_t* bottom = top + blocks * kAmxParts * kAmxTileWords;
      const float* top_sums = x.sums + (t * blocks + b) * kAmxRows;
      const float* bottom_sums = top_sums + blocks * kAmxRows;
      const bool first = b == 0, last = b == blocks - 1;
      for (int64_t q = 0; q < quads; ++q) {
        const int64_t at = b * halves + 2 * q;
        _tile_loadd(2, codes + at * kAmxTileWords, 64);
        _tile_loadd(3, codes + (at + 1) * kAmxTileWords, 64);
        _tile_zero(4);
        _tile_zero(5);
        if (lone) {
          // The two halves' sums alone are two chains of parts: slower a product, but half
          // the products of a padded pair.
          for (int64_t p = 0; p < kAmxParts; ++p) {
            _tile_loadd(0, top + p * kAmxTileWords, 64);
            _tile_dpbf16ps(4, 0, 2);
            _tile_dpbf16ps(5, 0, 3);
          }
        } else {
          _tile_zero(6);
          _tile_zero(7);
          for (int64_t p = 0; p < kAmxParts; ++p) {
            _tile_loadd(0, top + p * kAmxTileWords, 64);
            _tile_loadd(1, bottom + p * kAmxTileWords, 64);
            _tile_dpbf16ps(4, 0, 2);
            _tile_dpbf16ps(5, 0, 3);
            _tile_dpbf16ps(6, 1, 2);
            _tile_dpbf16ps(7, 1, 3);
          }
          _tile_stored(6, products[2], 64);
          _tile_stored(7, products[3], 64);
        }
        _tile_stored(4, products[0], 64);
        _tile_stored(5, products[1], 64);
        const float* s = scales + at * 2 * kAmxHalf;
        // Each half: from acc (none on the first block), to acc (the output on the last).
        for (int64_t half = 0; half < 2; ++half) {
          const int64_t column = (2 * q + half) * kAmxHalf;
          const float* scale = s + half * 2 * kAmxHalf;
          float* a = acc + column;
          const float* from = first ? nullptr : a;
          float* to = last ? o + column : a;
          const int64_t to_stride = last ? out_stride : width;
          scale_products<Source::kHasMin>(products[half], scale, top_sums, from, width, to,
                                          to_stride, last ? top_rows : kAmxRows);
          if (!lone) {
            scale_products<Source::kHasMin>(products[2 + half], scale, bottom_sums,
                                            from == nullptr ? nullptr : from + kAmxRows * width,
                                            width, to + kAmxRows * to_stride, to_stride,
                                            last ? bottom_rows : kAmxRows);
          }
        }
      }
    }
  }
  _tile_release();
}

}  // namespace astrai

#endif
