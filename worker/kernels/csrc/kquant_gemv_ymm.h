// The 8-bit Q4_K gemv on AVX2 (ymm, no VNNI): kquant_gemv.h says why and what it computes.
//
// Without vpdpbusd a 4-bit code times an 8-bit activation is vpmaddubsw (pairs of products in
// 16-bit words; four of them, 8 products of at most 15 x 127 each, still fit a word) and the
// sub-block scale is vpmaddwd. A woven 64-byte run is 8 columns x 8 code bytes; a ymm holds
// half of it, so each run is taken as columns 0-3 and 4-7, whose per-column sums meet in one
// vphaddd per row and super-block. The sub-block scales are decoded with 32-bit integer
// operations, four columns a word.
#pragma once

#include <cstdint>
#include <cstring>

#include "kquant_rows.h"

#if defined(__AVX2__)
namespace astrai {

inline int32_t sum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Row x[0 .. k) → codes, scales, sums as kquant_rows.h lays them out: codes = round(x / s),
// s = max |x| / 127 per 256 inputs.
inline void quantize_row_q8(const float* x, int64_t k, int8_t* codes, float* scales, int32_t* sums,
                            int32_t* pair_sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0);
  for (int64_t s = 0; s < k / kSuperBlock; ++s) {
    const float* in = x + s * kSuperBlock;
    __m256 amax = _mm256_setzero_ps();
    for (int64_t i = 0; i < kSuperBlock; i += 8)
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(in + i)));
    __m128 top4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    top4 = _mm_max_ps(top4, _mm_movehl_ps(top4, top4));
    top4 = _mm_max_ss(top4, _mm_movehdup_ps(top4));
    const float top = _mm_cvtss_f32(top4);
    scales[s] = top / 127.0f;
    const __m256 inverse = _mm256_set1_ps(top > 0 ? 127.0f / top : 0.0f);
    int32_t* block_sums = sums + s * (kSuperBlock / 16);
    for (int64_t i = 0; i < kSuperBlock; i += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j)
        q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(in + i + 8 * j), inverse));
      // packs work within 128-bit lanes: dwords 0 4 1 5 2 6 3 7 of the result are in order.
      const __m256i words = _mm256_packs_epi32(q[0], q[1]), words2 = _mm256_packs_epi32(q[2], q[3]);
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + s * kSuperBlock + i), bytes);
      block_sums[i / 16] = sum_epi32(_mm256_add_epi32(q[0], q[1]));
      block_sums[i / 16 + 1] = sum_epi32(_mm256_add_epi32(q[2], q[3]));
    }
    for (int p = 0; p < 4; ++p) {
      const int32_t even = block_sums[4 * p] + block_sums[4 * p + 1];
      const int32_t odd = block_sums[4 * p + 2] + block_sums[4 * p + 3];
      pair_sums[4 * s + p] =
          static_cast<int32_t>(static_cast<uint16_t>(even) | (static_cast<uint32_t>(odd) << 16));
    }
  }
}

// One super-block's sub-block scales and minimums of a woven group of 8 columns, as the
// 16-bit words the dot products take.
struct Q4KScalesYmm {
  // [half][sub-block]: words 4 c .. 4 c + 3 hold column 4 half + c's scale (a column's 8 code
  // bytes of a run are 4 words after vpmaddubsw).
  __m256i scale[2][8];
  // [p]: dword c holds column c's minimums of sub-blocks 2p (low word) and 2p + 1 (high).
  __m256i minimum[4];

  explicit Q4KScalesYmm(const uint8_t* super) {
    // Per sub-block, 12 bytes (kquant_format.h): 4 columns' scale or minimum per 32-bit word.
    uint32_t sc[8][2], mn[8][2];
    for (int s = 0; s < 8; ++s) {
      uint32_t w0, w1, w2;
      std::memcpy(&w0, super + 32 + 12 * s, 4);
      std::memcpy(&w1, super + 36 + 12 * s, 4);
      std::memcpy(&w2, super + 40 + 12 * s, 4);
      sc[s][0] = w0 & 0x3F3F3F3F;
      mn[s][0] = w1 & 0x3F3F3F3F;
      sc[s][1] = (w2 & 0x0F0F0F0F) | ((w0 >> 2) & 0x30303030);
      mn[s][1] = ((w2 >> 4) & 0x0F0F0F0F) | ((w1 >> 2) & 0x30303030);
    }
    const __m128i four_each = _mm_set_epi8(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int half = 0; half < 2; ++half)
      for (int s = 0; s < 8; ++s)
        scale[half][s] = _mm256_cvtepu8_epi16(
            _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int32_t>(sc[s][half])), four_each));
    for (int p = 0; p < 4; ++p) {
      const __m256i even = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(
          static_cast<int64_t>(mn[2 * p][0] | (static_cast<uint64_t>(mn[2 * p][1]) << 32))));
      const __m256i odd = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(
          mn[2 * p + 1][0] | (static_cast<uint64_t>(mn[2 * p + 1][1]) << 32))));
      minimum[p] = _mm256_or_si256(even, _mm256_slli_epi32(odd, 16));
    }
  }
};

// A woven super-block's 4-bit codes for the dot products: nibbles(q, j, half, &low, &high) are
// run j of sub-block pair q, columns 4 half .. + 3, as bytes (low: sub-block 2q, high: 2q + 1).
// One row unpacks them as it goes; several unpack them once into L1 (UnpackedCodes) and each
// row reads them there, which saves three of every seven vector operations per row.
struct PackedCodes {
  const uint8_t* super;

  void operator()(int q, int j, int half, __m256i* low, __m256i* high) const {
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i run = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(super + 128 + 256 * q + 64 * j + 32 * half));
    *low = _mm256_and_si256(run, nibble);
    *high = _mm256_and_si256(_mm256_srli_epi16(run, 4), nibble);
  }
};

struct UnpackedCodes {
  __m256i codes[4][4][2][2];  // [q][j][half][low, high]

  explicit UnpackedCodes(const uint8_t* super) {
    const PackedCodes packed{super};
    for (int q = 0; q < 4; ++q)
      for (int j = 0; j < 4; ++j)
        for (int half = 0; half < 2; ++half)
          packed(q, j, half, &codes[q][j][half][0], &codes[q][j][half][1]);
  }

  void operator()(int q, int j, int half, __m256i* low, __m256i* high) const {
    *low = codes[q][j][half][0];
    *high = codes[q][j][half][1];
  }
};

// Row `codes` (a super-block's 256 activations) against one woven super-block's `nibbles`:
// column c's Σ scale × code × activation in dword c.
template <typename Nibbles>
inline __m256i q4_k_super_dot(const Nibbles& nibbles, const Q4KScalesYmm& scales,
                              const int8_t* codes) {
  __m256i total[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int q = 0; q < 4; ++q) {  // sub-blocks 2q (low nibbles) and 2q + 1 (high)
    __m256i low[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    __m256i high[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int j = 0; j < 4; ++j) {
      int64_t lo, hi;
      std::memcpy(&lo, codes + 64 * q + 8 * j, 8);
      std::memcpy(&hi, codes + 64 * q + 32 + 8 * j, 8);
      const __m256i x_lo = _mm256_set1_epi64x(lo), x_hi = _mm256_set1_epi64x(hi);
      for (int half = 0; half < 2; ++half) {
        __m256i w_lo, w_hi;
        nibbles(q, j, half, &w_lo, &w_hi);
        low[half] = _mm256_add_epi16(low[half], _mm256_maddubs_epi16(w_lo, x_lo));
        high[half] = _mm256_add_epi16(high[half], _mm256_maddubs_epi16(w_hi, x_hi));
      }
    }
    for (int half = 0; half < 2; ++half) {
      total[half] =
          _mm256_add_epi32(total[half], _mm256_madd_epi16(low[half], scales.scale[half][2 * q]));
      total[half] = _mm256_add_epi32(total[half],
                                     _mm256_madd_epi16(high[half], scales.scale[half][2 * q + 1]));
    }
  }
  // Dwords 2c, 2c + 1 of each half are column (4 half + c)'s: hadd gives columns 0 1 4 5 |
  // 2 3 6 7, the permute puts them in order.
  return _mm256_permute4x64_epi64(_mm256_hadd_epi32(total[0], total[1]), _MM_SHUFFLE(3, 1, 2, 0));
}

// dot[r] += rows r < kRows of `x` against super-block s of a woven group, for its 8 columns.
template <int kRows, typename Nibbles>
inline void q4_k_super_rows(const uint8_t* super, const Nibbles& nibbles, const QuantizedRows& x,
                            int64_t first_row, int64_t s, __m256* dot) {
  const Q4KScalesYmm scales(super);
  const __m256 d = load_halves(super), dmin = load_halves(super + 16);
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = first_row + r;
    const __m256i sum = q4_k_super_dot(nibbles, scales, x.row_codes(row) + s * kSuperBlock);
    const __m256 xs = _mm256_set1_ps(x.scale(row, s));
    dot[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(d, xs), dot[r]);
    // Less Σ over sub-blocks of minimum × the activations' sum (two sub-blocks a word pair).
    const int32_t* pairs = x.row_pair_sums(row, s);
    __m256i m = _mm256_madd_epi16(scales.minimum[0], _mm256_set1_epi32(pairs[0]));
    for (int p = 1; p < 4; ++p)
      m = _mm256_add_epi32(m, _mm256_madd_epi16(scales.minimum[p], _mm256_set1_epi32(pairs[p])));
    dot[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, xs), dot[r]);
  }
}

// out[r][c] for rows r < kRows of `x` and the 8 columns of woven group `group`.
template <int kRows>
inline void q4_k_gemv_group(const uint8_t* weights, int64_t supers, int64_t group,
                            const QuantizedRows& x, int64_t first_row, float* out, int64_t n) {
  __m256 dot[kRows];
  for (int r = 0; r < kRows; ++r) dot[r] = _mm256_setzero_ps();
  const uint8_t* group_bytes = weights + group * supers * kQ4KWovenBytes;
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* super = group_bytes + s * kQ4KWovenBytes;
    for (int64_t line = 0; line < kQ4KWovenBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(super + kPrefetchAhead + line), _MM_HINT_T1);
    if constexpr (kRows == 1) {
      q4_k_super_rows<kRows>(super, PackedCodes{super}, x, first_row, s, dot);
    } else {
      q4_k_super_rows<kRows>(super, UnpackedCodes(super), x, first_row, s, dot);
    }
  }
  for (int r = 0; r < kRows; ++r) _mm256_storeu_ps(out + (first_row + r) * n + 8 * group, dot[r]);
}

}  // namespace astrai
#endif
