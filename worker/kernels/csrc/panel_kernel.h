// The block kernel for many activation rows (prefill, large batches): a panel of weights is
// dequantized to float32 once into L1, then an FMA micro-kernel of 6 rows by 16 columns runs
// over it, the classic register-blocked GEMM.
//
// Why two kernels: unpacking codes costs a few vector operations per input and column tile.
// Decoding a few rows, that is shared by few FMAs, so the direct kernel unpacks in registers
// and writes nothing; with many rows the unpacking amortizes, and 12 independent accumulators
// keep both FMA units busy where the direct kernel's 8-column tiles cannot (measured: the
// crossover, per CPU, is the probe's `panel_rows`).
//
// Dequantized weights equal, bit for bit, what the GGUF reader dequantized (d * code, then
// + m, rounded to float32 in that order), i.e. the float32 reference model's weights.
#pragma once

#include <algorithm>
#include <cstdint>

#include "activations.h"
#include "block_format.h"

namespace astrai {

constexpr int64_t kPanelBlocks = 8;  // 256 inputs x 16 columns x 4 bytes = 16 KB, in L1
constexpr int64_t kPanelWidth = 2 * kTile;

#if defined(__AVX2__)
// Blocks [block0, block0 + count) of one tile's records → panel[input][column_offset + 0..8],
// panel rows kWidth floats apart.
template <bool kQ8, int64_t kWidth = kPanelWidth>
void dequantize(const uint8_t* records, int64_t block0, int64_t count, float* panel,
                int64_t column_offset) {
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t* rec = records + (block0 + b) * record_bytes<kQ8>();
    const __m256 d = load_halves(rec);
    __m256 scale[4];  // undo the codes' byte shifts on the scale: exact powers of two
    for (int t = 0; t < 4; ++t) {
      scale[t] = _mm256_mul_ps(d, _mm256_set1_ps(kQ8 ? 0x1p-24f : std::ldexp(1.0f, -8 * t)));
    }
    const __m256 m = kQ8 ? _mm256_setzero_ps() : load_halves(rec + 16);
    float* out = panel + b * kBlock * kWidth + column_offset;
#pragma GCC unroll 32
    for (int i = 0; i < kBlock; ++i) {
      __m256 w = _mm256_mul_ps(codes_of<kQ8>(rec, i), scale[i % 4]);
      if constexpr (!kQ8) w = _mm256_add_ps(w, m);
      _mm256_store_ps(out + i * kWidth, w);
    }
  }
}

// out[0 .. R, 0 .. 8 NV] (+)= x[0 .. R, inputs] @ panel[inputs, 0 .. 8 NV], for the rows left
// over after the 6-row tiles.
template <int R, int NV>
void panel_tile(const float* panel, int64_t inputs, const float* x, int64_t x_stride, float* out,
                int64_t out_stride, bool accumulate) {
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm256_loadu_ps(out + r * out_stride + 8 * v) : _mm256_setzero_ps();
  for (int64_t i = 0; i < inputs; ++i) {
    __m256 w[NV];
    for (int v = 0; v < NV; ++v) w[v] = _mm256_load_ps(panel + i * kPanelWidth + 8 * v);
    for (int r = 0; r < R; ++r) {
      const __m256 xi = _mm256_broadcast_ss(x + r * x_stride + i);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(w[v], xi, acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(out + r * out_stride + 8 * v, acc[r][v]);
}

// The 6 x 16 micro-kernel, its 12 accumulators named one by one: held in an array, GCC kept a
// copy of each in memory and stored all 12 every input, halving the speed (seen in its asm).
#define ASTRAI_ROW(r, a, b)                                        \
  {                                                                \
    const __m256 xi = _mm256_broadcast_ss(x + (r) * x_stride + i); \
    a = _mm256_fmadd_ps(w0, xi, a);                                \
    b = _mm256_fmadd_ps(w1, xi, b);                                \
  }
#define ASTRAI_LOAD(r, a, b)                                                      \
  a = accumulate ? _mm256_loadu_ps(out + (r) * out_stride) : _mm256_setzero_ps(); \
  b = accumulate ? _mm256_loadu_ps(out + (r) * out_stride + 8) : _mm256_setzero_ps();
#define ASTRAI_STORE(r, a, b)                  \
  _mm256_storeu_ps(out + (r) * out_stride, a); \
  _mm256_storeu_ps(out + (r) * out_stride + 8, b);

inline void panel_tile_6x16(const float* panel, int64_t inputs, const float* x, int64_t x_stride,
                            float* out, int64_t out_stride, bool accumulate) {
  __m256 a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5;
  ASTRAI_LOAD(0, a0, b0)
  ASTRAI_LOAD(1, a1, b1)
  ASTRAI_LOAD(2, a2, b2)
  ASTRAI_LOAD(3, a3, b3)
  ASTRAI_LOAD(4, a4, b4)
  ASTRAI_LOAD(5, a5, b5)
  for (int64_t i = 0; i < inputs; ++i) {
    const __m256 w0 = _mm256_load_ps(panel + i * kPanelWidth);
    const __m256 w1 = _mm256_load_ps(panel + i * kPanelWidth + 8);
    ASTRAI_ROW(0, a0, b0)
    ASTRAI_ROW(1, a1, b1)
    ASTRAI_ROW(2, a2, b2)
    ASTRAI_ROW(3, a3, b3)
    ASTRAI_ROW(4, a4, b4)
    ASTRAI_ROW(5, a5, b5)
  }
  ASTRAI_STORE(0, a0, b0)
  ASTRAI_STORE(1, a1, b1)
  ASTRAI_STORE(2, a2, b2)
  ASTRAI_STORE(3, a3, b3)
  ASTRAI_STORE(4, a4, b4)
  ASTRAI_STORE(5, a5, b5)
}
#undef ASTRAI_ROW
#undef ASTRAI_LOAD
#undef ASTRAI_STORE

template <int NV>
void panel_rows(const float* panel, int64_t inputs, const float* x, int64_t x_stride, int64_t rows,
                float* out, int64_t out_stride, bool accumulate) {
  int64_t r = 0;
  for (; r + 6 <= rows; r += 6) {
    const float* xr = x + r * x_stride;
    float* o = out + r * out_stride;
    if constexpr (NV == 2) {
      panel_tile_6x16(panel, inputs, xr, x_stride, o, out_stride, accumulate);
    } else {
      panel_tile<6, NV>(panel, inputs, xr, x_stride, o, out_stride, accumulate);
    }
  }
  const int64_t left = rows - r;
  const float* xr = x + r * x_stride;
  float* o = out + r * out_stride;
  if (left == 5) panel_tile<5, NV>(panel, inputs, xr, x_stride, o, out_stride, accumulate);
  if (left == 4) panel_tile<4, NV>(panel, inputs, xr, x_stride, o, out_stride, accumulate);
  if (left == 3) panel_tile<3, NV>(panel, inputs, xr, x_stride, o, out_stride, accumulate);
  if (left == 2) panel_tile<2, NV>(panel, inputs, xr, x_stride, o, out_stride, accumulate);
  if (left == 1) panel_tile<1, NV>(panel, inputs, xr, x_stride, o, out_stride, accumulate);
}

// Where the panel kernels read their weights: a tile's (8 columns') blocks of 32 inputs,
// dequantized into a panel. The Q4_1 and Q8_0 records here; the K-quants in kquant_format.h.
template <bool kQ8>
struct RecordSource {
  static constexpr bool kHasMin = !kQ8;  // w = d * code + m: the AMX kernel needs sums
  static constexpr bool kAmx = true;     // amx_panel_kernel.h converts its blocks
  const uint8_t* weights;
  int64_t blocks;

  const uint8_t* record(int64_t tile, int64_t block) const {
    return weights + (tile * blocks + block) * record_bytes<kQ8>();
  }
  template <int64_t kWidth>
  void dequantize_blocks(int64_t tile, int64_t block0, int64_t count, float* panel,
                         int64_t column_offset) const {
    dequantize<kQ8, kWidth>(record(tile, 0), block0, count, panel, column_offset);
  }
  // The records of blocks [block0, block0 + count) of a tile towards L2.
  void prefetch(int64_t tile, int64_t block0, int64_t count) const {
    const uint8_t* next = record(tile, block0);
    for (int64_t line = 0; line < count * record_bytes<kQ8>(); line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T1);
  }
};

// Tiles [tile, tile + 1 or 2) for all m rows of x (m, k): out columns 8 * tile onwards.
template <class Source>
void panel_columns(const Source& source, int64_t tiles, int64_t blocks, int64_t tile,
                   const float* x, int64_t m, float* out, int64_t out_stride) {
  alignas(64) float panel[kPanelBlocks * kBlock * kPanelWidth];
  const bool pair = tile + 1 < tiles;
  const int64_t k = blocks * kBlock;
  for (int64_t block0 = 0; block0 < blocks; block0 += kPanelBlocks) {
    const int64_t count = std::min(kPanelBlocks, blocks - block0);
    source.template dequantize_blocks<kPanelWidth>(tile, block0, count, panel, 0);
    if (pair) source.template dequantize_blocks<kPanelWidth>(tile + 1, block0, count, panel, kTile);
    const float* xs = x + block0 * kBlock;
    float* o = out + tile * kTile;
    if (pair) {
      panel_rows<2>(panel, count * kBlock, xs, k, m, o, out_stride, block0 > 0);
    } else {
      panel_rows<1>(panel, count * kBlock, xs, k, m, o, out_stride, block0 > 0);
    }
  }
}
#endif

}  // namespace astrai
