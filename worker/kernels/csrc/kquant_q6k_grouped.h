// Q6_K weights rearranged once at load ("grouped") and multiplied by rows of activations in
// 8-bit integers (AVX-512 VNNI), from one row to many.
//
// Why: in the file's layout a super-block's 256 codes come apart only with ~20 shifts and
// masks, and a dot-product lane of 4 inputs gets the scale of its 16 in an order that changes
// from vector to vector, so each of the 4 dot products per row pays its own scale multiply
// and the codes' offset of 32 another: ~50 vector operations per super-block at one row, more
// than streaming its 210 bytes takes. Grouped, the same 210 bytes hold the codes so that
//   code vector j (j < 4), byte 4 l + b = the code of input 16 l + 4 j + b,
// i.e. dot-product lane l of all 4 vectors is scale group l: the 4 dot products chain into one
// sum whose lanes are the 16 groups, multiplied once by the 16 scales as they lie, and the
// offset (32 × each group's activation sum) is one subtraction. The codes are stored as
//   P, Q, R (64 bytes each): vectors 0, 1, 2 in their low 6 bits; vector 3's bits 0-1, 2-3,
//   4-5 in the top 2 bits of P, Q, R;
// then the 16 int8 scales and fp16 d as the file has them. The activations are rearranged
// the same way per row (4-byte runs, once per matmul). The arithmetic is ggml's (8-bit
// activations per 256 inputs, exact integer sums).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kquant_gemv.h"

#if defined(ASTRAI_KQUANT_GEMV)
namespace astrai {

// The codes of the file's Q6_K super-block `super` as 4 vectors of 64 codes 0..63 in input
// order (dequantize_row_q6_K's order).
struct Q6KBlock {
  __m512i codes[4];

  explicit Q6KBlock(const uint8_t* super) {
    const __m512i low4 = _mm512_set1_epi8(0x0F), two = _mm512_set1_epi8(0x03);
    // Per 16-bit word: the high bits' shift for the first 32 bytes and for the last 32.
    const __m512i first = _mm512_set_epi64(0x0002000200020002, 0x0002000200020002,
                                           0x0002000200020002, 0x0002000200020002, 0, 0, 0, 0);
    const __m512i second = _mm512_set_epi64(
        0x0006000600060006, 0x0006000600060006, 0x0006000600060006, 0x0006000600060006,
        0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004);
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(super + 64 * half);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + 128 + 32 * half)));
      const __m512i high_a =
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, first), two), 4);
      const __m512i high_b =
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, second), two), 4);
      codes[2 * half] = _mm512_or_si512(_mm512_and_si512(ql, low4), high_a);
      codes[2 * half + 1] =
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), high_b);
    }
  }
};

// One grouped super-block's codes (4 vectors of 64, 0..63) and scales (int32, lane l: group l).
struct Q6KGrouped {
  __m512i codes[4], scales;

  explicit Q6KGrouped(const uint8_t* super) {
    const __m512i six = _mm512_set1_epi8(0x3F);
    const __m512i p = _mm512_loadu_si512(super), q = _mm512_loadu_si512(super + 64),
                  r = _mm512_loadu_si512(super + 128);
    codes[0] = _mm512_and_si512(p, six);
    codes[1] = _mm512_and_si512(q, six);
    codes[2] = _mm512_and_si512(r, six);
    // Bits 6-7 of each byte of P, Q, R to bits 0-1, 2-3, 4-5 (16-bit shifts; the masks keep
    // each byte's own bits).
    const __m512i low = _mm512_and_si512(_mm512_srli_epi16(p, 6), _mm512_set1_epi8(0x03));
    const __m512i mid = _mm512_and_si512(_mm512_srli_epi16(q, 4), _mm512_set1_epi8(0x0C));
    const __m512i top = _mm512_and_si512(_mm512_srli_epi16(r, 2), _mm512_set1_epi8(0x30));
    codes[3] = _mm512_or_si512(_mm512_or_si512(low, mid), top);
    scales = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(super + 192)));
  }
};

// The file's Q6_K super-block → the grouped one (same 210 bytes).
inline void q6_k_group_super(const uint8_t* file, uint8_t* grouped) {
  alignas(64) uint8_t natural[kSuperBlock];
  const Q6KBlock block(file);  // codes in input order
  for (int j = 0; j < 4; ++j) _mm512_store_si512(natural + 64 * j, block.codes[j]);
  alignas(64) uint8_t vectors[4][64];
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 16; ++l) std::memcpy(vectors[j] + 4 * l, natural + 16 * l + 4 * j, 4);
  const __m512i v3 = _mm512_load_si512(vectors[3]);
  const __m512i two = _mm512_set1_epi8(0x03);
  for (int j = 0; j < 3; ++j) {
    // Vector 3's bits 2j, 2j + 1 into bits 6-7 (a 16-bit shift; the mask keeps the byte's).
    const __m512i bits = _mm512_and_si512(_mm512_srli_epi16(v3, 2 * j), two);
    const __m512i packed =
        _mm512_or_si512(_mm512_load_si512(vectors[j]), _mm512_slli_epi16(bits, 6));
    _mm512_storeu_si512(grouped + 64 * j, packed);
  }
  std::memcpy(grouped + 192, file + 192, kQ6KBytes - 192);
}

// The grouped super-block's weights in input order as dequantize_row_q6_K makes them.
inline void q6_k_grouped_row(const uint8_t* super, float* out) {
  const Q6KGrouped block(super);
  alignas(64) uint8_t codes[4][64];
  for (int j = 0; j < 4; ++j) _mm512_store_si512(codes[j], block.codes[j]);
  const auto* sc = reinterpret_cast<const int8_t*>(super + 192);
  const float d = half_to_float(load_u16(super + 208));
  for (int l = 0; l < 16; ++l) {
    const float scale = d * static_cast<float>(sc[l]);
    for (int j = 0; j < 4; ++j)
      for (int b = 0; b < 4; ++b)
        out[16 * l + 4 * j + b] =
            scale * static_cast<float>(static_cast<int>(codes[j][4 * l + b]) - 32);
  }
}

// Activation rows' codes in the grouped order (per super-block, dword 16 j + l = the row's
// dword 4 l + j), beside the rows' scales and sums of 16 as QuantizedRows holds them.
inline void group_row_codes(const int8_t* natural, int64_t k, int8_t* grouped) {
  for (int64_t s = 0; s < k / kSuperBlock; ++s)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l)
        std::memcpy(grouped + s * kSuperBlock + 64 * j + 4 * l,
                    natural + s * kSuperBlock + 16 * l + 4 * j, 4);
}

// Bytes of grouped Q6_K rows requested ahead of the super-block being multiplied.
constexpr int64_t kQ6KGroupedAhead = 44 * kQ6KBytes;

// out[r][c] (+)= for rows r < kRows of `x` (codes grouped: `grouped`) and grouped Q6_K row c,
// over super-blocks [s0, s1): d xs Σ_l scale_l (Σ code · x − 32 Σ x) over the 16 groups l of
// each; added to out where `add`, else stored.
template <int kRows>
inline void q6_k_grouped_row_dot(const uint8_t* weights, int64_t supers, int64_t c,
                                 const QuantizedRows& x, const int8_t* grouped, int64_t first_row,
                                 int64_t s0, int64_t s1, bool add, float* out, int64_t n) {
  __m512 dot[kRows];
  for (int r = 0; r < kRows; ++r) dot[r] = _mm512_setzero_ps();
  const uint8_t* row_bytes = weights + c * supers * kQ6KBytes;
  for (int64_t s = s0; s < s1; ++s) {
    const uint8_t* super = row_bytes + s * kQ6KBytes;
    for (int64_t line = 0; line < kQ6KBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(super + kQ6KGroupedAhead + line), _MM_HINT_T1);
    const Q6KGrouped block(super);
    const float d = half_to_float(load_u16(super + 208));
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first_row + r;
      const int8_t* codes = grouped + row * x.k + s * kSuperBlock;
      __m512i sum = _mm512_sub_epi32(_mm512_setzero_si512(),
                                     _mm512_slli_epi32(_mm512_loadu_si512(x.row_sums(row, s)), 5));
      for (int j = 0; j < 4; ++j)
        sum = _mm512_dpbusd_epi32(sum, block.codes[j], _mm512_loadu_si512(codes + 64 * j));
      dot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(sum, block.scales)),
                               _mm512_set1_ps(d * x.scale(row, s)), dot[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float& o = out[(first_row + r) * n + c];
    o = (add ? o : 0.0f) + _mm512_reduce_add_ps(dot[r]);
  }
}

// Bytes of activations one run of rows reads per column (a slice of the inputs): they stay
// in L1 from column to column. And bytes of weight columns multiplied by one run of rows
// before the next: they stay in L2 for the next run.
constexpr int64_t kQ6KActivationBytes = 16 * 1024;
constexpr int64_t kQ6KColumnBlockBytes = 256 * 1024;

// out (m, n) = x (m, k) times the grouped Q6_K weight (n, k / 256 × 210 bytes), for columns
// [first, last): activation rows eight at a time (each super-block unpacked once per eight),
// per block of columns and slice of the inputs, each run of rows in turn (the block's weights
// read once from memory, then from L2; a run's slice of activations from L1).
inline void q6_k_grouped_gemv(const uint8_t* weights, int64_t supers, const QuantizedRows& x,
                              const int8_t* grouped, int64_t m, int64_t first, int64_t last,
                              float* out, int64_t n) {
  const int64_t run_rows = std::min<int64_t>(m, 8);
  const int64_t slice =
      std::clamp<int64_t>(kQ6KActivationBytes / (run_rows * kSuperBlock), 1, supers);
  const int64_t block = std::max<int64_t>(1, kQ6KColumnBlockBytes / (slice * kQ6KBytes));
  for (int64_t c0 = first; c0 < last; c0 += block) {
    const int64_t c1 = std::min(last, c0 + block);
    for (int64_t s0 = 0; s0 < supers; s0 += slice) {
      const int64_t s1 = std::min(supers, s0 + slice);
      in_runs_of<8>(m, [&]<int kRows>(int64_t row) {
        for (int64_t c = c0; c < c1; ++c)
          q6_k_grouped_row_dot<kRows>(weights, supers, c, x, grouped, row, s0, s1, s0 > 0, out, n);
      });
    }
  }
}

}  // namespace astrai
#endif
