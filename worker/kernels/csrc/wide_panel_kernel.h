// The panel kernel's AVX-512 path: four tiles (32 columns) dequantized into one L1 panel, then
// a micro-kernel of 12 rows by two 16-lane registers.
//
// Why this shape: each FMA takes one activation broadcast from memory. With one register per
// row (16 columns) every FMA needs its own load; two registers per row halve the loads per
// FMA, and 24 accumulators cover the FMA latency on two ports. The 120 layer matmuls of a
// 512-row chunk went from 603 to 511 ms with it (bench.kernel_bench, AVX-512 Xeon,
// 2026-12-01; torch's float32 GEMM 293-363). The sums run over the inputs in order, one
// chain per output, as in the AVX2 panel kernel: the same bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "activations.h"
#include "block_format.h"
#include "panel_kernel.h"
#include "parallel.h"

namespace astrai {

#if defined(__AVX512F__)
constexpr int64_t kQuadTiles = 4;
constexpr int64_t kQuadWidth = kQuadTiles * kTile;  // 32 columns
constexpr int64_t kQuadBlocks = 8;                  // 256 inputs x 32 columns x 4 bytes = 32 KB
constexpr int kQuadRows = 12;

// out[0 .. R, 0 .. 32] (+)= x[0 .. R, inputs] @ panel[inputs, 0 .. 32]; x(r, i) is at
// x[r * x_stride + i], or with kPacked (the rows interleaved, R a tile) at x[i * R + r].
template <int R, bool kPacked = false>
void quad_tile(const float* panel, int64_t inputs, const float* x, int64_t x_stride, float* out,
               int64_t out_stride, bool accumulate) {
  __m512 low[R], high[R];
  for (int r = 0; r < R; ++r) {
    low[r] = accumulate ? _mm512_loadu_ps(out + r * out_stride) : _mm512_setzero_ps();
    high[r] = accumulate ? _mm512_loadu_ps(out + r * out_stride + 16) : _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < inputs; ++i) {
    const __m512 w0 = _mm512_load_ps(panel + i * kQuadWidth);
    const __m512 w1 = _mm512_load_ps(panel + i * kQuadWidth + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 xi = _mm512_set1_ps(kPacked ? x[i * R + r] : x[r * x_stride + i]);
      low[r] = _mm512_fmadd_ps(w0, xi, low[r]);
      high[r] = _mm512_fmadd_ps(w1, xi, high[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(out + r * out_stride, low[r]);
    _mm512_storeu_ps(out + r * out_stride + 16, high[r]);
  }
}

template <int R>
void quad_rows_left(const float* panel, int64_t inputs, const float* x, int64_t x_stride,
                    int64_t rows, float* out, int64_t out_stride, bool accumulate) {
  if constexpr (R > 0) {
    if (rows == R) {
      quad_tile<R>(panel, inputs, x, x_stride, out, out_stride, accumulate);
    } else {
      quad_rows_left<R - 1>(panel, inputs, x, x_stride, rows, out, out_stride, accumulate);
    }
  }
}

// x's whole 12-row tiles interleaved: tile t's input i, row r at [(t k + i) 12 + r], so that
// the micro-kernel's broadcasts read one line, where 12 row streams (6 KB apart for the MLP's
// down projection) fell into two L1 sets.
inline const float* interleave_rows(const float* x, int64_t m, int64_t k) {
  const int64_t tiles = m / kQuadRows;
  float* packed = scratch(Scratch::kInterleaved, tiles * k * kQuadRows);
  parallel_chunks(tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* dst = packed + t * k * kQuadRows;
      for (int64_t i = 0; i < k; ++i) {
        for (int r = 0; r < kQuadRows; ++r) dst[i * kQuadRows + r] = x[(t * kQuadRows + r) * k + i];
      }
    }
  });
  return packed;
}

// Tiles [tile, tile + 4) for all m rows of x (m, k): out columns 8 * tile onwards. `packed`:
// interleave_rows(x).
template <class Source>
void quad_columns(const Source& source, int64_t blocks, int64_t tile, const float* x,
                  const float* packed, int64_t m, float* out, int64_t out_stride) {
  alignas(64) float panel[kQuadBlocks * kBlock * kQuadWidth];
  const int64_t k = blocks * kBlock;
  for (int64_t block0 = 0; block0 < blocks; block0 += kQuadBlocks) {
    const int64_t count = std::min(kQuadBlocks, blocks - block0);
    for (int64_t t = 0; t < kQuadTiles; ++t) {
      source.template dequantize_blocks<kQuadWidth>(tile + t, block0, count, panel, t * kTile);
      // The next panel's weights into L2 while this one computes: a step's weights stream
      // from memory, and each panel's 5 KB arriving one miss at a time stalled the panel.
      source.prefetch(tile + t, block0 + count, std::min(kQuadBlocks, blocks - block0 - count));
    }
    const int64_t inputs = count * kBlock;
    const bool accumulate = block0 > 0;
    const float* xs = x + block0 * kBlock;
    float* o = out + tile * kTile;
    int64_t r = 0;
    for (; r + kQuadRows <= m; r += kQuadRows) {
      const float* xp = packed + (r * k + block0 * kBlock * kQuadRows);
      quad_tile<kQuadRows, true>(panel, inputs, xp, 0, o + r * out_stride, out_stride, accumulate);
    }
    quad_rows_left<kQuadRows - 1>(panel, inputs, xs + r * k, k, m - r, o + r * out_stride,
                                  out_stride, accumulate);
  }
}
#endif

}  // namespace astrai
