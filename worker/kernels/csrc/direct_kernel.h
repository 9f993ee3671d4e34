// The block kernel for few activation rows (decoding): codes unpacked in registers per input
// and multiplied straight into 8 outputs, no weight ever written out.
//
// Per block and column: sum_i w_i x_i = d * sum_i code_i x_i + m * sum_i x_i; the activations
// arrive pre-scaled for the shifted codes (activations.h), with their block sums for the m term.
#pragma once

#include <algorithm>
#include <cstdint>

#include "activations.h"
#include "block_format.h"

namespace astrai {

constexpr int64_t kPrefetchBytes = 2048;

#if defined(__AVX2__)
// Independent sums in flight per row and tile, to cover the FMA latency: 8 chains in all
// (measured on Zen 3: one row with 4 chains ran 1.4x faster than with 1 or 8).
template <int R, int NT>
constexpr int chains() {
  return R * NT >= 6 ? 1 : R * NT >= 4 ? 2 : 4;
}

// out rows [row0, row0 + R), the 8 NT columns of NT consecutive tiles (records of tile k at
// records + k * run), over every block. Two tiles per pass share each broadcast input: the
// one-tile kernel was bound by those loads (one per FMA), the pair ran 1.16x faster at 4 rows.
template <int R, bool kQ8, int NT>
void tile(const uint8_t* records, int64_t run, const Rows& rows, int64_t row0, int64_t blocks,
          float* out, const float* init, int64_t out_stride) {
  constexpr int kChains = chains<R, NT>();
  constexpr int64_t kRecord = kQ8 ? kQ8Record : kQ4Record;
  const float* x[R];
  float* o[R];
  for (int r = 0; r < R; ++r) {
    x[r] = rows.x + (row0 + r) * rows.k;
    o[r] = out + (row0 + r) * out_stride;
    for (int n = 0; n < NT; ++n) {
      const __m256 start = init == nullptr
                               ? _mm256_setzero_ps()
                               : _mm256_loadu_ps(init + (row0 + r) * out_stride + 8 * n);
      _mm256_storeu_ps(o[r] + 8 * n, start);
    }
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* rec[NT];
    for (int n = 0; n < NT; ++n) {
      rec[n] = records + n * run + b * kRecord;
      // The hardware prefetchers alone left one core at 6.7 of its 9 GB/s streaming
      // records from memory; asking for the lines 2 KB ahead brought it to 8.7 (AVX2 EPYC).
      for (int64_t line = 0; line < kRecord; line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(rec[n] + kPrefetchBytes + line), _MM_HINT_T0);
      }
    }
    __m256 part[R][NT][kChains];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < NT; ++n)
        for (int a = 0; a < kChains; ++a) part[r][n][a] = _mm256_setzero_ps();
#pragma GCC unroll 32
    for (int i = 0; i < kBlock; ++i) {
      __m256 w[NT];
      for (int n = 0; n < NT; ++n) w[n] = codes_of<kQ8>(rec[n], i);
      for (int r = 0; r < R; ++r) {
        const __m256 xi = _mm256_broadcast_ss(x[r] + b * kBlock + i);
        for (int n = 0; n < NT; ++n) {
          part[r][n][i % kChains] = _mm256_fmadd_ps(w[n], xi, part[r][n][i % kChains]);
        }
      }
    }
    // The running sums live in the output rows (L1), not in registers: the FMAs above need
    // every register, and spilling their chains cost more than this load and store.
    for (int n = 0; n < NT; ++n) {
      const __m256 d = load_halves(rec[n]);
      for (int r = 0; r < R; ++r) {
        __m256 sum = part[r][n][0];
        for (int a = 1; a < kChains; ++a) sum = _mm256_add_ps(sum, part[r][n][a]);
        __m256 acc = _mm256_fmadd_ps(d, sum, _mm256_loadu_ps(o[r] + 8 * n));
        if constexpr (!kQ8) {
          const float s = rows.sums[(row0 + r) * blocks + b];
          acc = _mm256_fmadd_ps(load_halves(rec[n] + 16), _mm256_set1_ps(s), acc);
        }
        _mm256_storeu_ps(o[r] + 8 * n, acc);
      }
    }
  }
}
#else
template <int R, bool kQ8>
void tile_scalar(const uint8_t* records, const Rows& rows, int64_t row0, int64_t blocks, float* out,
                 const float* init, int64_t out_stride) {
  for (int r = 0; r < R; ++r) {
    const float* x = rows.x + (row0 + r) * rows.k;
    float acc[kTile] = {};
    if (init != nullptr) std::copy_n(init + (row0 + r) * out_stride, kTile, acc);
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

template <int R, bool kQ8, int NT>
void tile(const uint8_t* records, int64_t run, const Rows& rows, int64_t row0, int64_t blocks,
          float* out, const float* init, int64_t out_stride) {
  for (int n = 0; n < NT; ++n) {
    tile_scalar<R, kQ8>(records + n * run, rows, row0, blocks, out + 8 * n,
                        init == nullptr ? nullptr : init + 8 * n, out_stride);
  }
}
#endif

// Rows [begin, end) of x against NT consecutive tiles' records, in register tiles of <= 4 rows.
// The sums start from `init` (same layout as out: the residual the layer adds) or from zero.
template <bool kQ8, int NT>
void tile_rows(const uint8_t* records, int64_t run, const Rows& rows, int64_t begin, int64_t end,
               int64_t blocks, float* out, const float* init, int64_t stride) {
  int64_t r = begin;
  for (; r + 4 <= end; r += 4) tile<4, kQ8, NT>(records, run, rows, r, blocks, out, init, stride);
  if (end - r == 3) tile<3, kQ8, NT>(records, run, rows, r, blocks, out, init, stride);
  if (end - r == 2) tile<2, kQ8, NT>(records, run, rows, r, blocks, out, init, stride);
  if (end - r == 1) tile<1, kQ8, NT>(records, run, rows, r, blocks, out, init, stride);
}

}  // namespace astrai
