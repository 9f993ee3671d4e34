// Woven Q4_K blocks as the tile unit's B tiles (amx_panel_kernel.h): a sub-block of 32 inputs
// is exactly one tile product, its codes 0..15 exact in bf16, and its scale d sc and minimum
// -dmin mn per column applied afterwards in float32, as for Q4_1's d and m.
#pragma once

#include <cstdint>

#include "amx_panel_kernel.h"
#include "kquant_format.h"

#if defined(ASTRAI_AMX)
namespace astrai {

// The byte moves of convert_pair below: within each 16-byte lane (two rows' 8 code bytes),
// the codes of inputs 4u .. 4u + 3 as words: row a's two, row b's two, for two tile rows.
struct Q4KSpread {
  __m512i pick[2], rows[2];

  Q4KSpread() {
    alignas(64) uint8_t bytes[2][64];
    for (int u = 0; u < 2; ++u) {
      const int order[8] = {0, 1, 8, 9, 2, 3, 10, 11};  // (row b: + 8) input offsets 0-3
      for (int lane = 0; lane < 4; ++lane) {
        for (int w = 0; w < 8; ++w) {
          const int at = order[w];
          bytes[u][16 * lane + 2 * w] = static_cast<uint8_t>(4 * u + at % 8 + (at / 8) * 8);
          bytes[u][16 * lane + 2 * w + 1] = 0x80;  // zero: the high byte of the word
        }
      }
      pick[u] = _mm512_load_si512(bytes[u]);
    }
    // Tile row words 2c + e (column c, input e of the pair): columns 0-7 from the left
    // group's words, 8-15 from the right's (index + 32); the second tile row 4 words on.
    alignas(64) uint16_t index[2][32];
    for (int half = 0; half < 2; ++half) {
      for (int c = 0; c < 16; ++c) {
        const int col = c % 8, from = c < 8 ? 0 : 32;
        for (int e = 0; e < 2; ++e)
          index[half][2 * c + e] =
              static_cast<uint16_t>(from + 8 * (col / 2) + 2 * (col % 2) + e + 4 * half);
      }
    }
    rows[0] = _mm512_load_si512(index[0]);
    rows[1] = _mm512_load_si512(index[1]);
  }
};

// Sub-block `block` % 8 of super-block `block` / 8 of woven groups `tile` and `tile` + 1 (16
// columns) as a B tile (row p: inputs 2p and 2p + 1 of each column, interleaved), then the
// columns' scales and minimums as floats.
inline void convert_pair(const Q4KWoven& source, int64_t tile, int64_t block, uint16_t* codes,
                         float* scales) {
  static const CodeSpread spread;
  static const Q4KSpread moves;
  const int64_t s = block % 8;
  const uint8_t* left = source.super_block(tile, block / 8);
  const uint8_t* right = source.super_block(tile + 1, block / 8);
  __m256 scale[2], minimum[2];
  q4_k_sub_block(left, s, &scale[0], &minimum[0]);
  q4_k_sub_block(right, s, &scale[1], &minimum[1]);
  const __m256 zero = _mm256_setzero_ps();
  _mm256_storeu_ps(scales, scale[0]);
  _mm256_storeu_ps(scales + 8, scale[1]);
  _mm256_storeu_ps(scales + 16, _mm256_sub_ps(zero, minimum[0]));
  _mm256_storeu_ps(scales + 24, _mm256_sub_ps(zero, minimum[1]));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const int64_t runs = 128 + 256 * (s / 2);
  for (int64_t r = 0; r < 4; ++r) {  // inputs 8 r .. 8 r + 8: tile rows 4 r .. 4 r + 4
    __m512i l = _mm512_loadu_si512(left + runs + 64 * r);
    __m512i rt = _mm512_loadu_si512(right + runs + 64 * r);
    if (s % 2 == 1) {
      l = _mm512_srli_epi16(l, 4);
      rt = _mm512_srli_epi16(rt, 4);
    }
    l = _mm512_and_si512(l, nibble);
    rt = _mm512_and_si512(rt, nibble);
    for (int u = 0; u < 2; ++u) {
      const __m512i lw = _mm512_shuffle_epi8(l, moves.pick[u]);
      const __m512i rw = _mm512_shuffle_epi8(rt, moves.pick[u]);
      for (int half = 0; half < 2; ++half) {
        const __m512i words = _mm512_permutex2var_epi16(lw, moves.rows[half], rw);
        _mm512_storeu_si512(codes + (4 * r + 2 * u + half) * kBlock,
                            _mm512_permutexvar_epi16(words, spread.table));
      }
    }
  }
}

}  // namespace astrai
#endif
