// The direct kernel's AVX-512 path: two 8-column tiles in one 16-lane register.
//
// Why: from two decoding rows on, the direct kernel is bound by its FMAs and the unpacking
// around them (one and, one convert per input and tile), not by memory. With 16 lanes one
// instruction of each kind covers a pair of tiles, so a pair costs half the instructions of
// the AVX2 path. Compiled only where the build's -march=native has AVX-512
// (worker/kernels/build.py); ASTRAI_KERNEL_ISA=avx2 builds without it, for comparison.
// Summation order is the AVX2 path's up to the number of chains, which follows the tile.
#pragma once

#include <cstdint>

#include "activations.h"
#include "block_format.h"
#include "direct_kernel.h"

namespace astrai {

#if defined(__AVX512F__)
// 16 fp16 values: 8 from a (tile n) in the low lanes, 8 from b (tile n + 1) in the high.
inline __m512 load_halves_pair(const uint8_t* a, const uint8_t* b) {
  const __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
  const __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(low), high, 1));
}

inline __m512i load_lanes_pair(const uint8_t* a, const uint8_t* b) {
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
  const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

// codes_of (block_format.h) for the 16 columns of two records at once.
template <bool kQ8>
inline __m512 codes_of_pair(const uint8_t* a, const uint8_t* b, int i) {
  const int t = i % 4;
  if constexpr (kQ8) {
    const int64_t at = 16 + 32 * (i / 4);
    const __m512i lanes = load_lanes_pair(a + at, b + at);
    const __m512i top = t == 3 ? lanes : _mm512_slli_epi32(lanes, 24 - 8 * t);
    return _mm512_cvtepi32_ps(
        _mm512_and_si512(top, _mm512_set1_epi32(static_cast<int>(0xFF000000u))));
  } else {
    const int64_t at = 32 + 32 * ((i % 16) / 4);
    __m512i lanes = load_lanes_pair(a + at, b + at);
    if (i >= 16) lanes = _mm512_srli_epi32(lanes, 4);
    return _mm512_cvtepi32_ps(_mm512_and_si512(lanes, _mm512_set1_epi32(0x0F << (8 * t))));
  }
}

// Independent sums per row: 8 or more in flight to cover the FMA latency on two ports.
template <int R>
constexpr int pair_chains() {
  return R >= 8 ? 1 : R >= 4 ? 2 : 4;
}

// The direct kernel (direct_kernel.h's tile<R, kQ8, 2>) with the pair in one register:
// out rows [row0, row0 + R), the 16 columns of tiles at records and records + run.
template <int R, bool kQ8>
void tile_pair(const uint8_t* records, int64_t run, const Rows& rows, int64_t row0, int64_t blocks,
               float* out, const float* init, int64_t out_stride) {
  constexpr int kChains = pair_chains<R>();
  constexpr int64_t kRecord = record_bytes<kQ8>();
  const float* x[R];
  float* o[R];
  for (int r = 0; r < R; ++r) {
    x[r] = rows.x + (row0 + r) * rows.k;
    o[r] = out + (row0 + r) * out_stride;
    const __m512 start =
        init == nullptr ? _mm512_setzero_ps() : _mm512_loadu_ps(init + (row0 + r) * out_stride);
    _mm512_storeu_ps(o[r], start);
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* first = records + b * kRecord;
    const uint8_t* second = first + run;
    for (int64_t line = 0; line < kRecord; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(first + kPrefetchBytes + line), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(second + kPrefetchBytes + line), _MM_HINT_T0);
    }
    __m512 part[R][kChains];
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < kChains; ++a) part[r][a] = _mm512_setzero_ps();
#pragma GCC unroll 32
    for (int i = 0; i < kBlock; ++i) {
      const __m512 w = codes_of_pair<kQ8>(first, second, i);
      for (int r = 0; r < R; ++r) {
        const __m512 xi = _mm512_set1_ps(x[r][b * kBlock + i]);
        part[r][i % kChains] = _mm512_fmadd_ps(w, xi, part[r][i % kChains]);
      }
    }
    const __m512 d = load_halves_pair(first, second);
    const __m512 m = kQ8 ? _mm512_setzero_ps() : load_halves_pair(first + 16, second + 16);
    for (int r = 0; r < R; ++r) {
      __m512 sum = part[r][0];
      for (int a = 1; a < kChains; ++a) sum = _mm512_add_ps(sum, part[r][a]);
      __m512 acc = _mm512_fmadd_ps(d, sum, _mm512_loadu_ps(o[r]));
      if constexpr (!kQ8) {
        acc = _mm512_fmadd_ps(m, _mm512_set1_ps(rows.sums[(row0 + r) * blocks + b]), acc);
      }
      _mm512_storeu_ps(o[r], acc);
    }
  }
}

// Rows [begin, end) against a pair of tiles, in register tiles of <= 8 rows.
template <bool kQ8>
void tile_rows_pair(const uint8_t* records, int64_t run, const Rows& rows, int64_t begin,
                    int64_t end, int64_t blocks, float* out, const float* init, int64_t stride) {
  int64_t r = begin;
  for (; r + 8 <= end; r += 8) tile_pair<8, kQ8>(records, run, rows, r, blocks, out, init, stride);
  switch (end - r) {
    case 7:
      tile_pair<7, kQ8>(records, run, rows, r, blocks, out, init, stride);
      break;
    case 6:
      tile_pair<6, kQ8>(records, run, rows, r, blocks, out, init, stride);
      break;
    case 5:
      tile_pair<5, kQ8>(records, run, rows, r, blocks, out, init, stride);
      break;
    case 4:
      tile_pair<4, kQ8>(records, run, rows, r, blocks, out, init, stride);
      break;
    case 3:
      tile_pair<3, kQ8>(records, run, rows, r, blocks, out, init, stride);
      break;
    case 2:
      tile_pair<2, kQ8>(records, run, rows, r, blocks, out, init, stride);
      break;
    case 1:
      tile_pair<1, kQ8>(records, run, rows, r, blocks, out, init, stride);
      break;
    default:
      break;
  }
}

#endif

}  // namespace astrai
