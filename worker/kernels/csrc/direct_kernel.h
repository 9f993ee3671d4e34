// The block kernel for few activation rows (decoding): codes unpacked in registers per input
// and multiplied straight into 8 outputs, no weight ever written out.
//
// Per block and column: sum_i w_i x_i = d * sum_i code_i x_i + m * sum_i x_i; the activations
// arrive pre-scaled for the shifted codes (activations.h), with their block sums for the m term.
#pragma once

#include <cstdint>

#include "activations.h"
#include "block_format.h"

namespace astrai {

constexpr int64_t kPrefetchBytes = 2048;

#if defined(__AVX2__)
// Independent sums per row: enough in flight to cover the FMA latency (measured on Zen 3:
// one row with 4 chains ran 1.4x faster than with 1 or 8).
template <int R>
constexpr int chains() {
  return R == 1 ? 4 : R == 2 ? 4 : 2;
}

// out rows [row0, row0 + R), the 8 columns of one tile, over every block of the records.
template <int R, bool kQ8>
void tile(const uint8_t* records, const Rows& rows, int64_t row0, int64_t blocks, float* out,
          int64_t out_stride) {
  constexpr int kChains = chains<R>();
  const float* x[R];
  float* o[R];
  for (int r = 0; r < R; ++r) {
    x[r] = rows.x.data() + (row0 + r) * rows.k;
    o[r] = out + (row0 + r) * out_stride;
    _mm256_storeu_ps(o[r], _mm256_setzero_ps());
  }
  constexpr int64_t kRecord = kQ8 ? kQ8Record : kQ4Record;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* rec = records + b * kRecord;
    // The hardware prefetchers alone left one core at 6.7 of its 9 GB/s streaming records
    // from memory; asking for the lines 2 KB ahead brought it to 8.7 (AVX2 EPYC, measured).
    for (int64_t line = 0; line < kRecord; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(rec + kPrefetchBytes + line), _MM_HINT_T0);
    }
    __m256 part[R][kChains];
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < kChains; ++a) part[r][a] = _mm256_setzero_ps();
#pragma GCC unroll 32
    for (int i = 0; i < kBlock; ++i) {
      const __m256 w = codes_of<kQ8>(rec, i);
      for (int r = 0; r < R; ++r) {
        const __m256 xi = _mm256_broadcast_ss(x[r] + b * kBlock + i);
        part[r][i % kChains] = _mm256_fmadd_ps(w, xi, part[r][i % kChains]);
      }
    }
    // The running sums live in the output rows (L1), not in registers: the 32 FMAs above
    // need every register, and spilling their chains cost more than this load and store.
    const __m256 d = load_halves(rec);
    for (int r = 0; r < R; ++r) {
      __m256 sum = part[r][0];
      for (int a = 1; a < kChains; ++a) sum = _mm256_add_ps(sum, part[r][a]);
      __m256 acc = _mm256_fmadd_ps(d, sum, _mm256_loadu_ps(o[r]));
      if constexpr (!kQ8) {
        const float s = rows.sums[(row0 + r) * blocks + b];
        acc = _mm256_fmadd_ps(load_halves(rec + 16), _mm256_set1_ps(s), acc);
      }
      _mm256_storeu_ps(o[r], acc);
    }
  }
}
#else
template <int R, bool kQ8>
void tile(const uint8_t* records, const Rows& rows, int64_t row0, int64_t blocks, float* out,
          int64_t out_stride) {
  for (int r = 0; r < R; ++r) {
    const float* x = rows.x.data() + (row0 + r) * rows.k;
    float acc[kTile] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* rec = records + b * (kQ8 ? kQ8Record : kQ4Record);
      for (int c = 0; c < kTile; ++c) {
        float part = 0.0f;
        for (int i = 0; i < kBlock; ++i) {
          int code;
          if constexpr (kQ8) {
            code = static_cast<int8_t>(rec[16 + 32 * (i / 4) + 4 * c + i % 4]);
          } else {
            const uint8_t byte = rec[32 + 32 * ((i % 16) / 4) + 4 * c + i % 4];
            code = i < 16 ? (byte & 0x0F) : (byte >> 4);
          }
          // x was scaled by input_scale(i); undo it here, where speed does not matter.
          part += static_cast<float>(code) * (x[b * kBlock + i] / input_scale(i, kQ8));
        }
        acc[c] += half_to_float(load_u16(rec + 2 * c)) * part;
        if constexpr (!kQ8) {
          acc[c] += half_to_float(load_u16(rec + 16 + 2 * c)) * rows.sums[(row0 + r) * blocks + b];
        }
      }
    }
    for (int c = 0; c < kTile; ++c) out[(row0 + r) * out_stride + c] = acc[c];
  }
}
#endif

// Rows [begin, end) of x against one tile's records, in register tiles of up to 4 rows.
template <bool kQ8>
void tile_rows(const uint8_t* records, const Rows& rows, int64_t begin, int64_t end,
               int64_t blocks, float* out, int64_t stride) {
  int64_t r = begin;
  for (; r + 4 <= end; r += 4) tile<4, kQ8>(records, rows, r, blocks, out, stride);
  if (end - r == 3) tile<3, kQ8>(records, rows, r, blocks, out, stride);
  if (end - r == 2) tile<2, kQ8>(records, rows, r, blocks, out, stride);
  if (end - r == 1) tile<1, kQ8>(records, rows, r, blocks, out, stride);
}

}  // namespace astrai
