// The panel path of a block matmul, for any weight source (panel_kernel.h's RecordSource, the
// K-quants of kquant_format.h): out (m, 8 tiles) = x (m, k) @ weights.T, x as it is (no
// prologue, no scaling). On AMX the tile unit takes the columns in fours; otherwise the
// float32 panel kernels (AVX-512 in fours, AVX2 in pairs).
#pragma once

#include <algorithm>
#include <cstdint>

#include "activations.h"
#include "amx_panel_kernel.h"
#include "block_format.h"
#include "panel_kernel.h"
#include "parallel.h"
#include "wide_panel_kernel.h"

namespace astrai {

#if defined(__AVX2__)
template <class Source>
void float_panel_matmul(const Source& source, const float* x_rows, int64_t m, int64_t tiles,
                        int64_t blocks, float* out) {
  const int64_t k = blocks * kBlock;
  const int64_t stride = tiles * kTile;
#if defined(__AVX512F__)
  // Four tiles a panel (wide_panel_kernel.h), the last one to three tiles in pairs below.
  const int64_t quads = tiles / kQuadTiles;
  const float* packed = quads > 0 ? interleave_rows(x_rows, m, k) : nullptr;
  // Every panel reads all of its rows' activations; rows in blocks of ~1 MB keep them in L2
  // however long the chunk. (At 512 rows, 3 MB for the MLP's down projection, it measured
  // neither faster nor slower on a 2 MB-L2 Xeon: its prefetchers kept up from L3.) At least
  // 96 rows: each row block dequantizes its weights again, and Q6_K's 8192-wide rows in
  // blocks of 24 made that cost more than the products.
  const int64_t row_block =
      std::max<int64_t>(8 * kQuadRows, (1 << 20) / (4 * k) / kQuadRows * kQuadRows);
#else
  const int64_t quads = 0;
  const float* packed = nullptr;
  const int64_t row_block = m;
#endif
  const int64_t first_pair = 4 * quads;  // the first tile of the pairs
  const int64_t groups = quads + (tiles - first_pair + 1) / 2;
  const int64_t row_blocks = (m + row_block - 1) / row_block;
  parallel_chunks(row_blocks * groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row0 = item / groups * row_block, g = item % groups;
      const int64_t count = std::min(row_block, m - row0);
      const float* x = x_rows + row0 * k;
      float* o = out + row0 * stride;
#if defined(__AVX512F__)
      if (g < quads) {
        quad_columns(source, blocks, kQuadTiles * g, x, packed + row0 * k, count, o, stride);
        continue;
      }
#endif
      panel_columns(source, tiles, blocks, first_pair + 2 * (g - quads), x, count, o, stride);
    }
  });
}
#endif

#if defined(ASTRAI_AMX)
// Tiles in fours on the tile unit (amx_panel_kernel.h), the last one to three on the float32
// panel kernel in pairs.
template <class Source>
void amx_panel_matmul(const Source& source, const float* x_rows, int64_t m, int64_t tiles,
                      int64_t blocks, float* out) {
  const int64_t k = blocks * kBlock, stride = tiles * kTile;
  const SplitRows split = split_rows(x_rows, m, k, Source::kHasMin);
  const int64_t quads = tiles / 4, first_pair = 4 * quads;
  // Rows in blocks of ~1 MB of parts (2 bytes a part), so that they stay in L2 while every
  // group of columns passes over them. Each row block converts its groups' codes again;
  // all rows in one pass per group measured up to 8% slower at 512 rows all the same. At
  // least 128 rows all the same: at 32 (a long input, 8192 wide) re-converting the codes
  // for every 32 rows cost as much as the products.
  const int64_t unit = 2 * kAmxRows;
  const int64_t row_block =
      std::max<int64_t>(4 * unit, (1 << 20) / (2 * kAmxParts * k) / unit * unit);
  const int64_t row_blocks = (m + row_block - 1) / row_block;
  // Groups as wide as kAmxMaxQuads, but at least ~4 per thread to share the work evenly.
  const int64_t threads = at::get_num_threads();
  const int64_t wanted = std::max<int64_t>(1, 4 * threads / row_blocks);
  int64_t width = std::clamp<int64_t>(quads / wanted, 1, kAmxMaxQuads);
  // Equal groups, as many for each thread: otherwise one thread computes the last group
  // while the others wait (576 outputs: 9 groups of two quads on two threads).
  for (int64_t w = kAmxMaxQuads; w >= 1; --w) {
    const int64_t groups_per_block = quads / w;
    if (quads % w == 0 && groups_per_block * row_blocks >= 2 * threads &&
        groups_per_block * row_blocks % threads == 0) {
      width = w;
      break;
    }
  }
  const int64_t amx_groups = (quads + width - 1) / width;
  const int64_t groups = amx_groups + (tiles - first_pair + 1) / 2;
  parallel_chunks(row_blocks * groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row0 = item / groups * row_block, g = item % groups;
      const int64_t count = std::min(row_block, m - row0);
      if (g < amx_groups) {
        const int64_t quad0 = g * width;
        amx_columns(source, blocks, quad0, std::min(width, quads - quad0), split, row0, count, m,
                    out, stride);
      } else {
        panel_columns(source, tiles, blocks, first_pair + 2 * (g - amx_groups), x_rows + row0 * k,
                      count, out + row0 * stride, stride);
      }
    }
  });
}
#endif

#if defined(__AVX2__)
// The panel path: on the tile unit where Linux grants it and there are four tiles or more.
template <class Source>
void panel_matmul(const Source& source, const float* x_rows, int64_t m, int64_t tiles,
                  int64_t blocks, float* out) {
#if defined(ASTRAI_AMX)
  if constexpr (Source::kAmx) {
    if (tiles >= 4 && amx_ready()) {
      amx_panel_matmul(source, x_rows, m, tiles, blocks, out);
      return;
    }
  }
#endif
  float_panel_matmul(source, x_rows, m, tiles, blocks, out);
}
#endif

}  // namespace astrai
