// K-quant weights (Q4_K woven by ggml, Q6_K as the file holds it) times a few rows of
// activations in 8-bit integers (AVX-512 VNNI), with the weights streamed ahead of the
// arithmetic.
//
// Why: at one to a few rows a decode step reads every weight once and does little with it, so
// it is bound by memory; ggml's gemv for these bytes stalls on each load before it computes
// (in cache it runs several times faster than from memory). Here the next super-blocks are
// prefetched while the current one is multiplied, and the codes unpacked once serve every
// row. As in ggml, the activations are rounded to 8 bits per 256 inputs (their sums per 32
// kept for the minimums), so the result is ggml's arithmetic, not the panels' float32.
#pragma once

#include <cstdint>
#include <cstring>

#include "kquant_format.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define ASTRAI_KQUANT_GEMV 1
namespace astrai {

// Activation rows as 8-bit integers: per row and super-block a scale, per 16 inputs a sum.
struct QuantizedRows {
  const int8_t* codes;  // (rows, k)
  const float* scales;  // (rows, k / 256)
  const int32_t* sums;  // (rows, k / 16)
  int64_t k;

  const int8_t* row_codes(int64_t row) const { return codes + row * k; }
  float scale(int64_t row, int64_t super) const { return scales[row * (k / kSuperBlock) + super]; }
  const int32_t* row_sums(int64_t row, int64_t super) const { return sums + row * (k / 16) + 16 * super; }
};

// Row x[0 .. k) → codes, scales, sums: codes = round(x / s), s = max |x| / 127 per 256.
inline void quantize_row_q8(const float* x, int64_t k, int8_t* codes, float* scales,
                            int32_t* sums) {
  for (int64_t s = 0; s < k / kSuperBlock; ++s) {
    const float* in = x + s * kSuperBlock;
    __m512 amax = _mm512_setzero_ps();
    for (int64_t i = 0; i < kSuperBlock; i += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(in + i)));
    const float top = _mm512_reduce_max_ps(amax);
    scales[s] = top / 127.0f;
    const __m512 inverse = _mm512_set1_ps(top > 0 ? 127.0f / top : 0.0f);
    for (int64_t i = 0; i < kSuperBlock; i += 16) {
      const __m512i a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(in + i), inverse));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + s * kSuperBlock + i), _mm512_cvtsepi32_epi8(a));
      sums[(s * kSuperBlock + i) / 16] = _mm512_reduce_add_epi32(a);
    }
  }
}

// One super-block's sub-block scales and minimums of a woven group of 8 rows, as integers:
// scale[s] has each row's scale twice (lanes 2r and 2r + 1: a row's 8 code bytes of a run
// are two dot-product lanes), minimum[s] each row's minimum once.
struct Q4KScales {
  __m512i scale[8];
  __m256i minimum[8];

  explicit Q4KScales(const uint8_t* super) {
    // Per sub-block s, bytes 12 s .. + 12 of the 96: words w0 (scales of rows 0-3 and the top
    // bits of rows 4-7's), w1 (minimums likewise), w2 (low nibbles of rows 4-7's); lane s of
    // w0, w1, w2 below (lanes 8-15 unused).
    const __m512i head = _mm512_loadu_si512(super + 32), tail = _mm512_loadu_si512(super + 96);
    const __m512i three = _mm512_set_epi32(45, 42, 39, 36, 33, 30, 27, 24, 21, 18, 15, 12, 9, 6, 3, 0);
    const __m512i w0 = _mm512_permutex2var_epi32(head, _mm512_and_si512(three, _mm512_set1_epi32(31)), tail);
    const __m512i w1 = _mm512_permutex2var_epi32(
        head, _mm512_and_si512(_mm512_add_epi32(three, _mm512_set1_epi32(1)), _mm512_set1_epi32(31)), tail);
    const __m512i w2 = _mm512_permutex2var_epi32(
        head, _mm512_and_si512(_mm512_add_epi32(three, _mm512_set1_epi32(2)), _mm512_set1_epi32(31)), tail);
    const __m512i six = _mm512_set1_epi8(0x3F), four = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
    const __m512i sc_low = _mm512_and_si512(w0, six), mn_low = _mm512_and_si512(w1, six);
    const __m512i sc_high = _mm512_or_si512(_mm512_and_si512(w2, four),
                                            _mm512_and_si512(_mm512_srli_epi32(w0, 2), top));
    const __m512i mn_high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), four),
                                            _mm512_and_si512(_mm512_srli_epi32(w1, 2), top));
    // Qword s: the 8 rows' bytes of sub-block s (unpack works within 128-bit lanes: the low
    // half gives sub-blocks 0, 1 | 4, 5, the high half 2, 3 | 6, 7).
    alignas(64) uint64_t sc[2][8], mn[2][8];
    _mm512_store_si512(sc[0], _mm512_unpacklo_epi32(sc_low, sc_high));
    _mm512_store_si512(sc[1], _mm512_unpackhi_epi32(sc_low, sc_high));
    _mm512_store_si512(mn[0], _mm512_unpacklo_epi32(mn_low, mn_high));
    _mm512_store_si512(mn[1], _mm512_unpackhi_epi32(mn_low, mn_high));
    const __m128i twice = _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    for (int b = 0; b < 8; ++b) {
      const int half = (b / 2) % 2, at = 2 * (b / 4) + b % 2;
      const __m128i bytes = _mm_cvtsi64_si128(static_cast<int64_t>(sc[half][at]));
      scale[b] = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, twice));
      minimum[b] = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn[half][at])));
    }
  }
};

// run<kRows>(first row) over rows [0, m): four at a time, then the one to three left (the
// kernels keep kRows rows' sums in registers, so their count is a template argument).
template <typename F>
inline void in_fours(int64_t m, const F& run) {
  int64_t row = 0;
  for (; row + 4 <= m; row += 4) run.template operator()<4>(row);
  switch (m - row) {
    case 3: run.template operator()<3>(row); break;
    case 2: run.template operator()<2>(row); break;
    case 1: run.template operator()<1>(row); break;
    default: break;
  }
}

// 8 fp16 at p as floats, each twice (lanes 2r and 2r + 1).
inline __m512 halves_twice(const uint8_t* p) {
  const __m512 once = _mm512_castps256_ps512(load_halves(p));
  return _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), once);
}

// Bytes ahead of the super-block being multiplied that are requested from memory: enough to
// cover the memory's latency at its bandwidth, little enough to stay in L1.
constexpr int64_t kPrefetchAhead = 8 * kQ4KWovenBytes;

// out[r][c] for rows r < kRows of `x` and the 8 columns of woven group `group`.
template <int kRows>
inline void q4_k_gemv_group(const uint8_t* weights, int64_t supers, int64_t group,
                            const QuantizedRows& x, int64_t first_row, float* out, int64_t n) {
  __m512 dot[kRows];
  __m256 minimums[kRows];
  for (int r = 0; r < kRows; ++r) {
    dot[r] = _mm512_setzero_ps();
    minimums[r] = _mm256_setzero_ps();
  }
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const uint8_t* group_bytes = weights + group * supers * kQ4KWovenBytes;
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* super = group_bytes + s * kQ4KWovenBytes;
    for (int64_t line = 0; line < kQ4KWovenBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(super + kPrefetchAhead + line), _MM_HINT_T1);
    const Q4KScales scales(super);
    __m512i sum[kRows];
    for (int r = 0; r < kRows; ++r) sum[r] = _mm512_setzero_si512();
    for (int64_t q = 0; q < 4; ++q) {  // sub-blocks 2q (low nibbles) and 2q + 1 (high)
      __m512i low[4], high[4];
      for (int j = 0; j < 4; ++j) {
        const __m512i run = _mm512_loadu_si512(super + 128 + 256 * q + 64 * j);
        low[j] = _mm512_and_si512(run, nibble);
        high[j] = _mm512_and_si512(_mm512_srli_epi16(run, 4), nibble);
      }
      for (int r = 0; r < kRows; ++r) {
        const int8_t* codes = x.row_codes(first_row + r) + s * kSuperBlock + 64 * q;
        __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
        for (int j = 0; j < 4; ++j) {
          int64_t lo, hi;
          std::memcpy(&lo, codes + 8 * j, 8);
          std::memcpy(&hi, codes + 32 + 8 * j, 8);
          a = _mm512_dpbusd_epi32(a, low[j], _mm512_set1_epi64(lo));
          b = _mm512_dpbusd_epi32(b, high[j], _mm512_set1_epi64(hi));
        }
        sum[r] = _mm512_add_epi32(sum[r], _mm512_mullo_epi32(a, scales.scale[2 * q]));
        sum[r] = _mm512_add_epi32(sum[r], _mm512_mullo_epi32(b, scales.scale[2 * q + 1]));
      }
    }
    const __m512 d = halves_twice(super);
    const __m256 dmin = load_halves(super + 16);
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first_row + r;
      const float xs = x.scale(row, s);
      dot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r]), _mm512_mul_ps(d, _mm512_set1_ps(xs)), dot[r]);
      const int32_t* sums = x.row_sums(row, s);
      __m256i m = _mm256_setzero_si256();
      for (int b = 0; b < 8; ++b) {
        const __m256i block_sum = _mm256_set1_epi32(sums[2 * b] + sums[2 * b + 1]);
        m = _mm256_add_epi32(m, _mm256_mullo_epi32(scales.minimum[b], block_sum));
      }
      minimums[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, _mm256_set1_ps(xs)), minimums[r]);
    }
  }
  const __m512i even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int r = 0; r < kRows; ++r) {
    const __m256 pairs = _mm256_add_ps(_mm512_castps512_ps256(_mm512_permutexvar_ps(even, dot[r])),
                                       _mm512_castps512_ps256(_mm512_permutexvar_ps(odd, dot[r])));
    _mm256_storeu_ps(out + (first_row + r) * n + 8 * group, _mm256_sub_ps(pairs, minimums[r]));
  }
}

// out (m, n) = x (m, k) times the woven Q4_K weight (n / 8 groups, k / 256, 1152 bytes), for
// groups [first, last); rows four at a time (a group's bytes stay in L1/L2 between them).
inline void q4_k_gemv_groups(const uint8_t* weights, int64_t supers, const QuantizedRows& x,
                             int64_t m, int64_t first, int64_t last, float* out, int64_t n) {
  for (int64_t g = first; g < last; ++g) {
    in_fours(m, [&]<int kRows>(int64_t row) {
      q4_k_gemv_group<kRows>(weights, supers, g, x, row, out, n);
    });
  }
}

// Q6_K super-block `super` of one row as 4 vectors of 64 codes 0..63 in input order
// (dequantize_row_q6_K's order), and its 16 scales as int32 lanes: scale[j] the scales of
// codes[j] (each of a vector's 16 dot-product lanes of 4 inputs gets its 16 inputs' scale),
// all16 the 16 scales once each.
struct Q6KBlock {
  __m512i codes[4], scale[4], all16;

  explicit Q6KBlock(const uint8_t* super) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), two = _mm512_set1_epi8(0x03);
    // Per 16-bit word: the high bits' shift for the first 32 bytes and for the last 32.
    const __m512i first = _mm512_set_epi64(0x0002000200020002, 0x0002000200020002, 0x0002000200020002,
                                           0x0002000200020002, 0, 0, 0, 0);
    const __m512i second = _mm512_set_epi64(0x0006000600060006, 0x0006000600060006, 0x0006000600060006,
                                            0x0006000600060006, 0x0004000400040004, 0x0004000400040004,
                                            0x0004000400040004, 0x0004000400040004);
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(super + 64 * half);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + 128 + 32 * half)));
      const __m512i high_a = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, first), two), 4);
      const __m512i high_b = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, second), two), 4);
      codes[2 * half] = _mm512_or_si512(_mm512_and_si512(ql, low4), high_a);
      codes[2 * half + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), high_b);
    }
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(super + 192));
    for (int j = 0; j < 4; ++j) {
      const __m128i spread = _mm_set_epi8(4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 2,
                                          4 * j + 2, 4 * j + 2, 4 * j + 2, 4 * j + 1, 4 * j + 1,
                                          4 * j + 1, 4 * j + 1, 4 * j, 4 * j, 4 * j, 4 * j);
      scale[j] = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(scales, spread));
    }
    all16 = _mm512_cvtepi8_epi32(scales);
  }
};

// Bytes of Q6_K rows requested ahead of the super-block being multiplied.
constexpr int64_t kQ6KPrefetchAhead = 8 * kQ6KBytes;

// out[r][c] for rows r < kRows of `x` and Q6_K row c: d s Σ sc (code - 32) x per 16 inputs.
template <int kRows>
inline void q6_k_gemv_row(const uint8_t* weights, int64_t supers, int64_t c,
                          const QuantizedRows& x, int64_t first_row, float* out, int64_t n) {
  __m512 dot[kRows];
  for (int r = 0; r < kRows; ++r) dot[r] = _mm512_setzero_ps();
  const uint8_t* row_bytes = weights + c * supers * kQ6KBytes;
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* super = row_bytes + s * kQ6KBytes;
    for (int64_t line = 0; line < kQ6KBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(super + kQ6KPrefetchAhead + line), _MM_HINT_T0);
    const Q6KBlock block(super);
    const float d = half_to_float(load_u16(super + 208));
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first_row + r;
      const int8_t* codes = x.row_codes(row) + s * kSuperBlock;
      __m512i sum = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), block.codes[j],
                                              _mm512_loadu_si512(codes + 64 * j));
        sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(a, block.scale[j]));
      }
      // The codes' offset of 32: 32 Σ sc times each 16 inputs' sum of activations.
      const __m512i sums = _mm512_loadu_si512(x.row_sums(row, s));
      sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(_mm512_mullo_epi32(sums, block.all16), 5));
      dot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(d * x.scale(row, s)), dot[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) out[(first_row + r) * n + c] = _mm512_reduce_add_ps(dot[r]);
}

// out (m, n) = x (m, k) times the Q6_K weight (n, k / 256 x 210 bytes), for rows [first, last).
inline void q6_k_gemv_rows(const uint8_t* weights, int64_t supers, const QuantizedRows& x,
                           int64_t m, int64_t first, int64_t last, float* out, int64_t n) {
  for (int64_t c = first; c < last; ++c) {
    in_fours(m, [&]<int kRows>(int64_t row) {
      q6_k_gemv_row<kRows>(weights, supers, c, x, row, out, n);
    });
  }
}

}  // namespace astrai
#endif
