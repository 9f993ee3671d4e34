// The K-quants as weight sources of the panel kernels (panel_matmul.h), read where they lie:
//   Q4_K as ggml's CPU backend weaves it (block_q4_Kx8, ggml-cpu/repack.h), eight rows a
//        group, per super-block of 256 inputs 1152 bytes: fp16 d[8], fp16 dmin[8], 96 bytes
//        of 6-bit sub-block scales and mins (12 a sub-block, for the 8 rows), then the codes
//        in 8-byte runs: run r holds bytes 8 (r / 8) .. + 8 of row r % 8's 128 code bytes.
//        A row's code byte 32 j + l holds input 64 j + l in its low and 64 j + 32 + l in its
//        high nibble; w = d sc * code - dmin mn (sc, mn of the input's sub-block of 32).
//   Q6_K as the file holds it (block_q6_K), one row after the other, 210 bytes a
//        super-block: 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales (one
//        per 16 inputs), fp16 d; w = d sc * (code - 32).
// Dequantized, each weight is the very float32 ggml's dequantize_row_* makes of it (the same
// products in the same order), so the panel kernels compute with the file's numbers.
#pragma once

#include <cstdint>
#include <cstring>

#include "activations.h"
#include "block_format.h"
#include "panel_kernel.h"
#include "vec_math.h"

namespace astrai {

constexpr int64_t kSuperBlock = 256;  // inputs per K-quant super-block
constexpr int64_t kQ4KWovenBytes = 1152;
constexpr int64_t kQ6KBytes = 210;

#if defined(__AVX2__)
// The 8 rows' scale and minimum of sub-block s of a woven Q4_K super-block, as ggml's
// make_block_q4_Kx8 packs them: bytes 0-3 the scales of rows 0-3 (their top two bits bits
// 4-5 of rows 4-7's), 4-7 the mins likewise, 8-11 the low nibbles of rows 4-7's.
inline void q4_k_sub_block(const uint8_t* super, int64_t s, __m256* scale, __m256* minimum) {
  const uint8_t* b = super + 32 + 12 * s;
  alignas(32) float sc[8], mn[8];
  for (int c = 0; c < 4; ++c) {
    sc[c] = static_cast<float>(b[c] & 63);
    mn[c] = static_cast<float>(b[4 + c] & 63);
    sc[c + 4] = static_cast<float>((b[8 + c] & 15) | ((b[c] >> 6) << 4));
    mn[c + 4] = static_cast<float>((b[8 + c] >> 4) | ((b[4 + c] >> 6) << 4));
  }
  *scale = _mm256_mul_ps(load_halves(super), _mm256_load_ps(sc));
  *minimum = _mm256_mul_ps(load_halves(super + 16), _mm256_load_ps(mn));
}

// A 64-byte run of 8 rows' code bytes as two vectors of 8 dwords, one per row: bytes 0-3 of
// each row's 8, and bytes 4-7.
inline void q4_k_run_words(const uint8_t* run, __m256i* low, __m256i* high) {
  const __m256 a = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(run)));
  const __m256 b =
      _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(run + 32)));
  // [a0 a2 b0 b2 | a4 a6 b4 b6] = rows 0 1 4 5 | 2 3 6 7, then into row order.
  const __m256i even = _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
  const __m256i odd = _mm256_castps_si256(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  *low = _mm256_permute4x64_epi64(even, _MM_SHUFFLE(3, 1, 2, 0));
  *high = _mm256_permute4x64_epi64(odd, _MM_SHUFFLE(3, 1, 2, 0));
}

struct Q4KWoven {
  static constexpr bool kHasMin = true;
  static constexpr bool kAmx = true;  // kquant_amx.h
  const uint8_t* weights;             // (groups of 8 rows, super-blocks, 1152) bytes
  int64_t supers;                     // super-blocks per row

  const uint8_t* super_block(int64_t tile, int64_t s) const {
    return weights + (tile * supers + s) * kQ4KWovenBytes;
  }

  // Blocks [block0, block0 + count) of 32 inputs of tile `tile` → panel rows, kWidth apart.
  template <int64_t kWidth>
  void dequantize_blocks(int64_t tile, int64_t block0, int64_t count, float* panel,
                         int64_t column_offset) const {
    for (int64_t b = block0; b < block0 + count; ++b) {
      const uint8_t* super = super_block(tile, b / 8);
      const int64_t s = b % 8, shift = 4 * (s % 2);
      __m256 scale, minimum;
      q4_k_sub_block(super, s, &scale, &minimum);
      const uint8_t* runs = super + 128 + 256 * (s / 2);
      float* out = panel + (b - block0) * kBlock * kWidth + column_offset;
      const __m256i nibble = _mm256_set1_epi32(0x0F);
      for (int64_t r = 0; r < 4; ++r) {  // inputs 8 r .. 8 r + 8 of the sub-block
        __m256i words[2];
        q4_k_run_words(runs + 64 * r, &words[0], &words[1]);
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
          const __m256i codes =
              _mm256_and_si256(_mm256_srli_epi32(words[t / 4], 8 * (t % 4) + shift), nibble);
          const __m256 w = _mm256_fmsub_ps(_mm256_cvtepi32_ps(codes), scale, minimum);
          _mm256_store_ps(out + (8 * r + t) * kWidth, w);
        }
      }
    }
  }

  void prefetch(int64_t tile, int64_t block0, int64_t count) const {
    if (count <= 0) return;
    const uint8_t* next = super_block(tile, block0 / 8);
    for (int64_t line = 0; line < count * kQ4KWovenBytes / 8; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T1);
  }
};

// out[c][0 .. 256] = super-block `super` of Q6_K row c, as dequantize_row_q6_K computes it.
inline void q6_k_row(const uint8_t* super, float* out) {
  const uint8_t* ql = super;
  const uint8_t* qh = super + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(super + 192);
  const float d = half_to_float(load_u16(super + 208));
  const __m256i low4 = _mm256_set1_epi32(0x0F), two = _mm256_set1_epi32(3);
  const __m256i offset = _mm256_set1_epi32(32);
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t l = 0; l < 32; l += 8) {
      const int64_t is = l / 16;
      auto bytes = [](const uint8_t* p) {
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      };
      const __m256i a = bytes(ql + 64 * n + l), b = bytes(ql + 64 * n + 32 + l);
      const __m256i h = bytes(qh + 32 * n + l);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(a, low4),
                          _mm256_slli_epi32(_mm256_and_si256(h, two), 4)),
          _mm256_or_si256(_mm256_and_si256(b, low4),
                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), two), 4)),
          _mm256_or_si256(_mm256_srli_epi32(a, 4),
                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), two), 4)),
          _mm256_or_si256(_mm256_srli_epi32(b, 4), _mm256_slli_epi32(_mm256_srli_epi32(h, 6), 4)),
      };
      for (int64_t part = 0; part < 4; ++part) {
        const float scale = d * static_cast<float>(sc[8 * n + is + 2 * part]);
        const __m256 values = _mm256_cvtepi32_ps(_mm256_sub_epi32(q[part], offset));
        _mm256_storeu_ps(out + 128 * n + 32 * part + l,
                         _mm256_mul_ps(_mm256_set1_ps(scale), values));
      }
    }
  }
}

// rows[r][0 .. 8] (r < 8, `stride` floats apart) → out[i][0 .. 8] (i < 8, kWidth apart).
template <int64_t kWidth>
inline void transpose_8x8(const float* rows, int64_t stride, float* out) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(rows + i * stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_store_ps(out + i * kWidth, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_store_ps(out + (i + 4) * kWidth, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

struct Q6KRows {
  static constexpr bool kHasMin = false;
  // No tile-unit path: its scales change every 16 inputs, half a tile product's 32.
  static constexpr bool kAmx = false;
  const uint8_t* weights;  // (rows, super-blocks x 210) bytes, rows a multiple of 8
  int64_t supers;

  const uint8_t* super_block(int64_t row, int64_t s) const {
    return weights + (row * supers + s) * kQ6KBytes;
  }

  // Whole super-blocks only (block0 and count multiples of 8): the panels are 8 blocks.
  template <int64_t kWidth>
  void dequantize_blocks(int64_t tile, int64_t block0, int64_t count, float* panel,
                         int64_t column_offset) const {
    alignas(32) float rows[kTile * kSuperBlock];
    for (int64_t s = block0 / 8; s < (block0 + count) / 8; ++s) {
      for (int64_t c = 0; c < kTile; ++c)
        q6_k_row(super_block(tile * kTile + c, s), rows + c * kSuperBlock);
      float* out = panel + (8 * s - block0) * kBlock * kWidth + column_offset;
      for (int64_t i = 0; i < kSuperBlock; i += 8)
        transpose_8x8<kWidth>(rows + i, kSuperBlock, out + i * kWidth);
    }
  }

  void prefetch(int64_t tile, int64_t block0, int64_t count) const {
    if (count <= 0) return;
    for (int64_t c = 0; c < kTile; ++c) {
      const uint8_t* next = super_block(tile * kTile + c, block0 / 8);
      for (int64_t line = 0; line < count / 8 * kQ6KBytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T1);
    }
  }
};
#endif

}  // namespace astrai
