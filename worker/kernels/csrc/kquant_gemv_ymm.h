// The 8-bit gemv of woven Q4_K and Q5_K on AVX2 (ymm, no VNNI): kquant_gemv.h says why and
// what it computes.
//
// Without vpdpbusd a 4- or 5-bit code times an 8-bit activation is vpmaddubsw (pairs of
// products in 16-bit words; four of them, 8 products of at most 31 x 127 each, still fit a
// word) and the sub-block scale is vpmaddwd. A woven 64-byte run is 8 columns x 8 code bytes; a ymm
// holds half of it, so each run is taken as columns 0-3 and 4-7, whose per-column sums meet in one
// vphaddd per row and super-block. The sub-block scales and minimums are decoded in vectors:
// three dword gathers, then one byte shuffle per vector the dot products take.
#pragma once

#include <cstdint>
#include <cstring>

#include "kquant_q5k_woven.h"
#include "kquant_rows.h"

#if defined(__AVX2__)
namespace astrai {

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
    const float top = hmax(amax);
    scales[s] = top / 127.0f;
    const __m256 inverse = _mm256_set1_ps(top > 0 ? 127.0f / top : 0.0f);
    int32_t* block_sums = sums + s * (kSuperBlock / 16);
    for (int64_t i = 0; i < kSuperBlock; i += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j)
        q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(in + i + 8 * j), inverse));
      // packs work within 128-bit lanes: the result's dwords taken 0 4 1 5 2 6 3 7 are in order.
      const __m256i words = _mm256_packs_epi32(q[0], q[1]), words2 = _mm256_packs_epi32(q[2], q[3]);
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + s * kSuperBlock + i), bytes);
      block_sums[i / 16] = hsum_epi32(_mm256_add_epi32(q[0], q[1]));
      block_sums[i / 16 + 1] = hsum_epi32(_mm256_add_epi32(q[2], q[3]));
    }
    for (int p = 0; p < 4; ++p) {
      const int32_t even = block_sums[4 * p] + block_sums[4 * p + 1];
      const int32_t odd = block_sums[4 * p + 2] + block_sums[4 * p + 3];
      pair_sums[4 * s + p] =
          static_cast<int32_t>(static_cast<uint16_t>(even) | (static_cast<uint32_t>(odd) << 16));
    }
  }
}

// Dword 3s + k of the 24 in a, b, c (dwords 0-7, 8-15, 16-23) in lane s.
template <int k>
inline __m256i dwords_of_sub_blocks(__m256i a, __m256i b, __m256i c) {
  const __m256i index = _mm256_setr_epi32(k % 8, (3 + k) % 8, (6 + k) % 8, (9 + k) % 8,
                                          (12 + k) % 8, (15 + k) % 8, (18 + k) % 8, (21 + k) % 8);
  constexpr int from_b = k == 0 ? 0x38 : k == 1 ? 0x18 : 0x1C;  // lanes whose dword is in b
  constexpr int from_c = k == 0 ? 0xC0 : 0xE0;                  // and in c
  const __m256i ab = _mm256_blend_epi32(_mm256_permutevar8x32_epi32(a, index),
                                        _mm256_permutevar8x32_epi32(b, index), from_b);
  return _mm256_blend_epi32(ab, _mm256_permutevar8x32_epi32(c, index), from_c);
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
    // Bytes 32-127 as 24 dwords; sub-block s's 12 bytes (kquant_format.h) are dwords 3s
    // (scales of columns 0-3, top bits of 4-7's), 3s + 1 (minimums likewise) and 3s + 2 (low
    // nibbles of columns 4-7's). Lane s of w0, w1, w2 below: sub-block s's.
    const auto at = [&](int offset) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + offset));
    };
    const __m256i a = at(32), b = at(64), c = at(96);
    const __m256i w0 = dwords_of_sub_blocks<0>(a, b, c), w1 = dwords_of_sub_blocks<1>(a, b, c),
                  w2 = dwords_of_sub_blocks<2>(a, b, c);
    const __m256i six = _mm256_set1_epi8(0x3F), four = _mm256_set1_epi8(0x0F),
                  top = _mm256_set1_epi8(0x30);
    // Dword s: the byte of each of 4 columns (0-3: low, 4-7: high) of sub-block s.
    const __m256i sc_low = _mm256_and_si256(w0, six), mn_low = _mm256_and_si256(w1, six);
    const __m256i sc_high = _mm256_or_si256(_mm256_and_si256(w2, four),
                                            _mm256_and_si256(_mm256_srli_epi32(w0, 2), top));
    const __m256i mn_high = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), four),
                                            _mm256_and_si256(_mm256_srli_epi32(w1, 2), top));
    // scale[half][s]: both 128-bit lanes hold dwords 4 (s / 4) .. + 3, and one byte shuffle
    // spreads dword s % 4's bytes over the words (zero bytes: index -128).
    constexpr char z = -128;
    const __m256i spread[4] = {
        _mm256_setr_epi8(0, z, 0, z, 0, z, 0, z, 1, z, 1, z, 1, z, 1, z, 2, z, 2, z, 2, z, 2, z, 3,
                         z, 3, z, 3, z, 3, z),
        _mm256_setr_epi8(4, z, 4, z, 4, z, 4, z, 5, z, 5, z, 5, z, 5, z, 6, z, 6, z, 6, z, 6, z, 7,
                         z, 7, z, 7, z, 7, z),
        _mm256_setr_epi8(8, z, 8, z, 8, z, 8, z, 9, z, 9, z, 9, z, 9, z, 10, z, 10, z, 10, z, 10, z,
                         11, z, 11, z, 11, z, 11, z),
        _mm256_setr_epi8(12, z, 12, z, 12, z, 12, z, 13, z, 13, z, 13, z, 13, z, 14, z, 14, z, 14,
                         z, 14, z, 15, z, 15, z, 15, z, 15, z)};
    const __m256i halves[2] = {sc_low, sc_high};
    for (int half = 0; half < 2; ++half) {
      const __m256i first = _mm256_permute4x64_epi64(halves[half], _MM_SHUFFLE(1, 0, 1, 0));
      const __m256i last = _mm256_permute4x64_epi64(halves[half], _MM_SHUFFLE(3, 2, 3, 2));
      for (int s = 0; s < 8; ++s)
        scale[half][s] = _mm256_shuffle_epi8(s < 4 ? first : last, spread[s % 4]);
    }
    // minimum[p]: lane 0 holds columns 0-3's dwords, lane 1 columns 4-7's, of sub-blocks
    // 4 (p / 2) .. + 3; the shuffle takes sub-blocks 2p and 2p + 1 of each column.
    const __m256i pair[2] = {
        _mm256_setr_epi8(0, z, 4, z, 1, z, 5, z, 2, z, 6, z, 3, z, 7, z, 0, z, 4, z, 1, z, 5, z, 2,
                         z, 6, z, 3, z, 7, z),
        _mm256_setr_epi8(8, z, 12, z, 9, z, 13, z, 10, z, 14, z, 11, z, 15, z, 8, z, 12, z, 9, z,
                         13, z, 10, z, 14, z, 11, z, 15, z)};
    const __m256i minimums[2] = {_mm256_permute2x128_si256(mn_low, mn_high, 0x20),
                                 _mm256_permute2x128_si256(mn_low, mn_high, 0x31)};
    for (int p = 0; p < 4; ++p) minimum[p] = _mm256_shuffle_epi8(minimums[p / 2], pair[p % 2]);
  }
};

// Bit `kBit` of each byte of `plane` at bit 4, the rest 0: one 16-bit shift by at most 4
// moves no bit across a byte's bit 4 from its neighbour.
template <int kBit>
inline __m256i fifth_bit(__m256i plane) {
  __m256i at = plane;
  if constexpr (kBit < 4) at = _mm256_slli_epi16(plane, 4 - kBit);
  if constexpr (kBit > 4) at = _mm256_srli_epi16(plane, kBit - 4);
  return _mm256_and_si256(at, _mm256_set1_epi8(0x10));
}

// A woven super-block's codes for the dot products: get<J>(q, half, &low, &high) are run J of
// sub-block pair q, columns 4 half .. + 3, as bytes (low: sub-block 2q, high: 2q + 1), each
// with its fifth bit where kFive (Q5_K, kquant_q5k_woven.h). One row unpacks them as it goes;
// several unpack them once into L1 (UnpackedCodes) and each row reads them there, which saves
// three of every seven vector operations per row (Q4_K; more for Q5_K).
template <bool kFive>
struct PackedCodes {
  const uint8_t* super;

  template <int J>
  void get(int q, int half, __m256i* low, __m256i* high) const {
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i run = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(super + 128 + 256 * q + 64 * J + 32 * half));
    *low = _mm256_and_si256(run, nibble);
    *high = _mm256_and_si256(_mm256_srli_epi16(run, 4), nibble);
    if constexpr (kFive) {
      const __m256i plane = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(super + kQ5KFifthBits + 64 * q + 32 * half));
      *low = _mm256_or_si256(*low, fifth_bit<2 * J>(plane));
      *high = _mm256_or_si256(*high, fifth_bit<2 * J + 1>(plane));
    }
  }
};

template <bool kFive>
struct UnpackedCodes {
  __m256i codes[4][4][2][2];  // [q][j][half][low, high]

  explicit UnpackedCodes(const uint8_t* super) {
    const PackedCodes<kFive> packed{super};
    for (int q = 0; q < 4; ++q)
      for_each_index<4>([&]<int J>() {
        for (int half = 0; half < 2; ++half)
          packed.template get<J>(q, half, &codes[q][J][half][0], &codes[q][J][half][1]);
      });
  }

  template <int J>
  void get(int q, int half, __m256i* low, __m256i* high) const {
    *low = codes[q][J][half][0];
    *high = codes[q][J][half][1];
  }
};

// Row `codes` (a super-block's 256 activations) against one woven super-block's `nibbles`:
// column c's Σ scale × code × activation in dword c. Four of vpmaddubsw's pair sums share a
// word: 8 products of at most 31 x 127 (a 5-bit code) fit.
template <typename Codes>
inline __m256i woven_super_dot(const Codes& nibbles, const Q4KScalesYmm& scales,
                               const int8_t* codes) {
  __m256i total[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int q = 0; q < 4; ++q) {  // sub-blocks 2q (low nibbles) and 2q + 1 (high)
    __m256i low[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    __m256i high[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for_each_index<4>([&]<int J>() {
      int64_t lo, hi;
      std::memcpy(&lo, codes + 64 * q + 8 * J, 8);
      std::memcpy(&hi, codes + 64 * q + 32 + 8 * J, 8);
      const __m256i x_lo = _mm256_set1_epi64x(lo), x_hi = _mm256_set1_epi64x(hi);
      for (int half = 0; half < 2; ++half) {
        __m256i w_lo, w_hi;
        nibbles.template get<J>(q, half, &w_lo, &w_hi);
        low[half] = _mm256_add_epi16(low[half], _mm256_maddubs_epi16(w_lo, x_lo));
        high[half] = _mm256_add_epi16(high[half], _mm256_maddubs_epi16(w_hi, x_hi));
      }
    });
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
template <int kRows, typename Codes>
inline void woven_super_rows(const uint8_t* super, const Codes& nibbles, const QuantizedRows& x,
                             int64_t first_row, int64_t s, __m256* dot) {
  const Q4KScalesYmm scales(super);
  const __m256 d = load_halves(super), dmin = load_halves(super + 16);
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = first_row + r;
    const __m256i sum = woven_super_dot(nibbles, scales, x.row_codes(row) + s * kSuperBlock);
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

// out[r][c] for rows r < kRows of `x` and the 8 columns of woven group `group` (Q5_K where
// kFive, else Q4_K).
template <int kRows, bool kFive>
inline void woven_gemv_group(const uint8_t* weights, int64_t supers, int64_t group,
                             const QuantizedRows& x, int64_t first_row, float* out, int64_t n) {
  constexpr int64_t kBytes = kFive ? kQ5KWovenBytes : kQ4KWovenBytes;
  __m256 dot[kRows];
  for (int r = 0; r < kRows; ++r) dot[r] = _mm256_setzero_ps();
  const uint8_t* group_bytes = weights + group * supers * kBytes;
  for (int64_t s = 0; s < supers; ++s) {
    const uint8_t* super = group_bytes + s * kBytes;
    for (int64_t line = 0; line < kBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(super + kPrefetchSupers * kBytes + line),
                   _MM_HINT_T1);
    if constexpr (kRows == 1) {
      woven_super_rows<kRows>(super, PackedCodes<kFive>{super}, x, first_row, s, dot);
    } else {
      woven_super_rows<kRows>(super, UnpackedCodes<kFive>(super), x, first_row, s, dot);
    }
  }
  for (int r = 0; r < kRows; ++r) _mm256_storeu_ps(out + (first_row + r) * n + 8 * group, dot[r]);
}

}  // namespace astrai
#endif
