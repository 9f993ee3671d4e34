// The 8-bit gemv of woven Q4_K and Q5_K on AVX-512 VNNI (zmm): kquant_gemv.h says why and what
// it computes.
#pragma once

#include <cstdint>
#include <cstring>

#include "kquant_q5k_woven.h"
#include "kquant_rows.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
namespace astrai {

// Row x[0 .. k) → codes, scales, sums: codes = round(x / s), s = max |x| / 127 per 256. A sum
// of 32 codes is at most 32 · 127 in size, so it fits a 16-bit word.
inline void quantize_row_q8(const float* x, int64_t k, int8_t* codes, float* scales, int32_t* sums,
                            int32_t* pair_sums) {
  for (int64_t s = 0; s < k / kSuperBlock; ++s) {
    const float* in = x + s * kSuperBlock;
    __m512 amax = _mm512_setzero_ps();
    for (int64_t i = 0; i < kSuperBlock; i += 16)
      amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(in + i)));
    const float top = _mm512_reduce_max_ps(amax);
    scales[s] = top / 127.0f;
    const __m512 inverse = _mm512_set1_ps(top > 0 ? 127.0f / top : 0.0f);
    int32_t* block_sums = sums + s * (kSuperBlock / 16);
    for (int64_t i = 0; i < kSuperBlock; i += 16) {
      const __m512i a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(in + i), inverse));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + s * kSuperBlock + i),
                       _mm512_cvtsepi32_epi8(a));
      block_sums[i / 16] = _mm512_reduce_add_epi32(a);
    }
    for (int p = 0; p < 4; ++p) {
      const int32_t even = block_sums[4 * p] + block_sums[4 * p + 1];
      const int32_t odd = block_sums[4 * p + 2] + block_sums[4 * p + 3];
      pair_sums[4 * s + p] =
          static_cast<int32_t>(static_cast<uint16_t>(even) | (static_cast<uint32_t>(odd) << 16));
    }
  }
}

// Each sub-block's 6-bit scales and minimums of a woven Q4_K super-block's 8 rows (columns of
// the output): qword b of `scales` (`mins`) holds sub-block b's, a byte per row.
inline void q4_k_scale_bytes(const uint8_t* super, uint64_t scales[8], uint64_t mins[8]) {
  // Per sub-block s, bytes 12 s .. + 12 of the 96: words w0 (scales of rows 0-3 and the top
  // bits of rows 4-7's), w1 (minimums likewise), w2 (low nibbles of rows 4-7's); lane s of
  // w0, w1, w2 below (lanes 8-15 unused).
  const __m512i head = _mm512_loadu_si512(super + 32), tail = _mm512_loadu_si512(super + 96);
  const __m512i three =
      _mm512_set_epi32(45, 42, 39, 36, 33, 30, 27, 24, 21, 18, 15, 12, 9, 6, 3, 0);
  const __m512i w0 =
      _mm512_permutex2var_epi32(head, _mm512_and_si512(three, _mm512_set1_epi32(31)), tail);
  const __m512i w1 = _mm512_permutex2var_epi32(
      head, _mm512_and_si512(_mm512_add_epi32(three, _mm512_set1_epi32(1)), _mm512_set1_epi32(31)),
      tail);
  const __m512i w2 = _mm512_permutex2var_epi32(
      head, _mm512_and_si512(_mm512_add_epi32(three, _mm512_set1_epi32(2)), _mm512_set1_epi32(31)),
      tail);
  const __m512i six = _mm512_set1_epi8(0x3F), four = _mm512_set1_epi8(0x0F),
                top = _mm512_set1_epi8(0x30);
  const __m512i sc_low = _mm512_and_si512(w0, six), mn_low = _mm512_and_si512(w1, six);
  const __m512i sc_high =
      _mm512_or_si512(_mm512_and_si512(w2, four), _mm512_and_si512(_mm512_srli_epi32(w0, 2), top));
  const __m512i mn_high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), four),
                                          _mm512_and_si512(_mm512_srli_epi32(w1, 2), top));
  // Qword s: the 8 rows' bytes of sub-block s (unpack works within 128-bit lanes: the low
  // half gives sub-blocks 0, 1 | 4, 5, the high half 2, 3 | 6, 7).
  alignas(64) uint64_t sc[2][8], mn[2][8];
  _mm512_store_si512(sc[0], _mm512_unpacklo_epi32(sc_low, sc_high));
  _mm512_store_si512(sc[1], _mm512_unpackhi_epi32(sc_low, sc_high));
  _mm512_store_si512(mn[0], _mm512_unpacklo_epi32(mn_low, mn_high));
  _mm512_store_si512(mn[1], _mm512_unpackhi_epi32(mn_low, mn_high));
  for (int b = 0; b < 8; ++b) {
    const int half = (b / 2) % 2, at = 2 * (b / 4) + b % 2;
    scales[b] = sc[half][at];
    mins[b] = mn[half][at];
  }
}

// One super-block's sub-block scales and minimums of a woven group of 8 rows (columns of the
// output), as integers.
struct Q4KScales {
  // Lanes 2c and 2c + 1 (a column's 8 code bytes of a run are two dot-product lanes): column
  // c's scales of sub-blocks 2q (low word) and 2q + 1 (high word).
  __m512i scale_pair[4];
  // Lane 2c: column c's minimums of sub-blocks 2p and 2p + 1 as 16-bit words; lane 2c + 1: 0.
  __m512i minimum[4];

  explicit Q4KScales(const uint8_t* super) {
    alignas(64) uint64_t sc[8], mn[8];
    q4_k_scale_bytes(super, sc, mn);
    const __m128i twice = _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m256i each[8];
    __m512i scale[8];
    for (int b = 0; b < 8; ++b) {
      const __m128i bytes = _mm_cvtsi64_si128(static_cast<int64_t>(sc[b]));
      scale[b] = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, twice));
      each[b] = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(mn[b])));
    }
    for (int q = 0; q < 4; ++q)
      scale_pair[q] = _mm512_or_si512(scale[2 * q], _mm512_slli_epi32(scale[2 * q + 1], 16));
    for (int p = 0; p < 4; ++p)
      minimum[p] = _mm512_cvtepu32_epi64(
          _mm256_or_si256(each[2 * p], _mm256_slli_epi32(each[2 * p + 1], 16)));
  }
};

// 8 fp16 at p as floats, each twice (lanes 2r and 2r + 1).
inline __m512 halves_twice(const uint8_t* p) {
  const __m512 once = _mm512_castps256_ps512(load_halves(p));
  return _mm512_permutexvar_ps(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0),
                               once);
}

// Bit `kBit` of each byte of `plane` at bit 4, or'd into `codes` (a byte's low four bits).
template <int kBit>
inline __m512i with_fifth_bit(__m512i codes, __m512i plane) {
  __m512i at = plane;
  if constexpr (kBit < 4) at = _mm512_slli_epi16(plane, 4 - kBit);
  if constexpr (kBit > 4) at = _mm512_srli_epi16(plane, kBit - 4);
  // codes | (at & 0x10): no bit crosses a byte's bit 4 in a 16-bit shift by at most 4.
  return _mm512_ternarylogic_epi32(codes, at, _mm512_set1_epi8(0x10), 0xF8);
}

// out[r][c] for rows r < kRows of `x` and the 8 columns of woven group `group` (Q5_K where
// kFive, kquant_q5k_woven.h; else Q4_K).
template <int kRows, bool kFive>
inline void woven_gemv_group(const uint8_t* weights, int64_t supers, int64_t group,
                             const QuantizedRows& x, int64_t first_row, float* out, int64_t n) {
  constexpr int64_t kBytes = kFive ? kQ5KWovenBytes : kQ4KWovenBytes;
  // Runs whose dot products share a lane before the scales: 16 products of a 4-bit code and
  // an 8-bit activation fit a 16-bit word, of a 5-bit one 8.
  constexpr int kRunsPerWord = kFive ? 2 : 4;
  __m512 dot[kRows];
  for (int r = 0; r < kRows; ++r) dot[r] = _mm512_setzero_ps();
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const uint8_t* group_bytes = weights + group * supers * kBytes;
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* super = group_bytes + s * kBytes;
    for (int64_t line = 0; line < kBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(super + kPrefetchSupers * kBytes + line),
                   _MM_HINT_T1);
    const Q4KScales scales(super);
    __m512i sum[kRows];
    for (int r = 0; r < kRows; ++r) sum[r] = _mm512_setzero_si512();
    for (int64_t q = 0; q < 4; ++q) {  // sub-blocks 2q (low nibbles) and 2q + 1 (high)
      __m512i low[4], high[4];
      for_each_index<4>([&]<int J>() {
        const __m512i run = _mm512_loadu_si512(super + 128 + 256 * q + 64 * J);
        low[J] = _mm512_and_si512(run, nibble);
        high[J] = _mm512_and_si512(_mm512_srli_epi16(run, 4), nibble);
        if constexpr (kFive) {
          const __m512i plane = _mm512_loadu_si512(super + kQ5KFifthBits + 64 * q);
          low[J] = with_fifth_bit<2 * J>(low[J], plane);
          high[J] = with_fifth_bit<2 * J + 1>(high[J], plane);
        }
      });
      for (int r = 0; r < kRows; ++r) {
        const int8_t* codes = x.row_codes(first_row + r) + s * kSuperBlock + 64 * q;
        for (int j0 = 0; j0 < 4; j0 += kRunsPerWord) {
          __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
          for (int j = j0; j < j0 + kRunsPerWord; ++j) {
            int64_t lo, hi;
            std::memcpy(&lo, codes + 8 * j, 8);
            std::memcpy(&hi, codes + 32 + 8 * j, 8);
            a = _mm512_dpbusd_epi32(a, low[j], _mm512_set1_epi64(lo));
            b = _mm512_dpbusd_epi32(b, high[j], _mm512_set1_epi64(hi));
          }
          // Lanes of a and b within 16 bits: as a pair of words they take their scales in one
          // dot product.
          const __m512i pair = _mm512_mask_blend_epi16(0xAAAAAAAA, a, _mm512_slli_epi32(b, 16));
          sum[r] = _mm512_dpwssd_epi32(sum[r], pair, scales.scale_pair[q]);
        }
      }
    }
    const __m512 d = halves_twice(super), dmin = halves_twice(super + 16);
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first_row + r;
      const __m512 xs = _mm512_set1_ps(x.scale(row, s));
      dot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r]), _mm512_mul_ps(d, xs), dot[r]);
      // Less Σ over sub-blocks of minimum × the activations' sum (two sub-blocks per 16-bit
      // pair), in each column's even lane.
      const int32_t* pairs = x.row_pair_sums(row, s);
      __m512i m = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p)
        m = _mm512_dpwssd_epi32(m, scales.minimum[p], _mm512_set1_epi32(pairs[p]));
      dot[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dmin, xs), dot[r]);
    }
  }
  const __m512i even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 15, 13, 11, 9, 7, 5, 3, 1);
  for (int r = 0; r < kRows; ++r) {
    const __m256 pairs = _mm256_add_ps(_mm512_castps512_ps256(_mm512_permutexvar_ps(even, dot[r])),
                                       _mm512_castps512_ps256(_mm512_permutexvar_ps(odd, dot[r])));
    _mm256_storeu_ps(out + (first_row + r) * n + 8 * group, pairs);
  }
}

}  // namespace astrai
#endif
