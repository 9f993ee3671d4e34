// Q6_K weights rearranged once at load ("grouped") and multiplied by rows of activations in
// 8-bit integers (AVX-512 VNNI: vpdpbusd; AVX2: vpmaddubsw + vpmaddwd), from one row to many.
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

#if defined(__AVX2__)
namespace astrai {

// The codes (0..63) of the file's Q6_K super-block `super` in input order, as
// dequantize_row_q6_K reads them: per half of 128 inputs, 64 bytes of low nibbles and 32 of
// high bit pairs.
inline void q6_k_natural_codes(const uint8_t* super, uint8_t* codes) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = super + 64 * half;
    const uint8_t* qh = super + 128 + 32 * half;
    uint8_t* out = codes + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l] = static_cast<uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
      out[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
      out[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      out[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

// The file's Q6_K super-block → the grouped one (same 210 bytes): at load, once.
inline void q6_k_group_super(const uint8_t* file, uint8_t* grouped) {
  uint8_t natural[kSuperBlock];
  q6_k_natural_codes(file, natural);
  for (int l = 0; l < 16; ++l)
    for (int b = 0; b < 4; ++b) {
      const int at = 4 * l + b;
      const uint8_t fourth = natural[16 * l + 12 + b];  // vector 3's code, 2 bits to each
      for (int j = 0; j < 3; ++j)
        grouped[64 * j + at] =
            static_cast<uint8_t>(natural[16 * l + 4 * j + b] | (((fourth >> (2 * j)) & 3) << 6));
    }
  std::memcpy(grouped + 192, file + 192, kQ6KBytes - 192);
}

// The grouped super-block's weights in input order as dequantize_row_q6_K makes them.
inline void q6_k_grouped_row(const uint8_t* super, float* out) {
  const auto* sc = reinterpret_cast<const int8_t*>(super + 192);
  const float d = half_to_float(load_u16(super + 208));
  for (int l = 0; l < 16; ++l) {
    const float scale = d * static_cast<float>(sc[l]);
    for (int b = 0; b < 4; ++b) {
      const int at = 4 * l + b;
      const uint8_t p = super[at], q = super[64 + at], r = super[128 + at];
      const int codes[4] = {p & 0x3F, q & 0x3F, r & 0x3F,
                            (p >> 6) | ((q >> 6) << 2) | ((r >> 6) << 4)};
      for (int j = 0; j < 4; ++j)
        out[16 * l + 4 * j + b] = scale * static_cast<float>(codes[j] - 32);
    }
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

#if defined(ASTRAI_KQUANT_GEMV_ZMM)
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

#else
// One grouped super-block's codes and scales as two ymm halves (half h: groups 8 h .. 8 h + 7).
struct Q6KGroupedYmm {
  __m256i codes[2][4];      // [half][vector j], 0..63
  __m256i scale_pairs[2];   // dword l: the group's scale in both words
  __m256i offset_scale[2];  // dword l: 32 × the scale in the low word, 0 in the high one

  explicit Q6KGroupedYmm(const uint8_t* super) {
    const __m256i six = _mm256_set1_epi8(0x3F), low_word = _mm256_set1_epi32(0xFFFF);
    for (int half = 0; half < 2; ++half) {
      const auto at = [&](int v) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(super + 64 * v + 32 * half));
      };
      const __m256i p = at(0), q = at(1), r = at(2);
      codes[half][0] = _mm256_and_si256(p, six);
      codes[half][1] = _mm256_and_si256(q, six);
      codes[half][2] = _mm256_and_si256(r, six);
      const __m256i low = _mm256_and_si256(_mm256_srli_epi16(p, 6), _mm256_set1_epi8(0x03));
      const __m256i mid = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0C));
      const __m256i top = _mm256_and_si256(_mm256_srli_epi16(r, 2), _mm256_set1_epi8(0x30));
      codes[half][3] = _mm256_or_si256(_mm256_or_si256(low, mid), top);
      const __m256i sc = _mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(super + 192 + 8 * half)));
      scale_pairs[half] =
          _mm256_or_si256(_mm256_and_si256(sc, low_word), _mm256_slli_epi32(sc, 16));
      offset_scale[half] = _mm256_and_si256(_mm256_slli_epi32(sc, 5), low_word);
    }
  }
};

// out[r][c] (+)= for rows r < kRows of `x` (codes grouped: `grouped`) and grouped Q6_K row c,
// over super-blocks [s0, s1), as the zmm form computes it. Two vectors' products (at most
// 2 × 2 × 63 × 127) share a 16-bit word before vpmaddwd applies the group's scale; the codes'
// offset is 32 × scale × the group's activation sum, whose int32 fits the low word.
template <int kRows>
inline void q6_k_grouped_row_dot(const uint8_t* weights, int64_t supers, int64_t c,
                                 const QuantizedRows& x, const int8_t* grouped, int64_t first_row,
                                 int64_t s0, int64_t s1, bool add, float* out, int64_t n) {
  __m256 dot[kRows];
  for (int r = 0; r < kRows; ++r) dot[r] = _mm256_setzero_ps();
  const uint8_t* row_bytes = weights + c * supers * kQ6KBytes;
  for (int64_t s = s0; s < s1; ++s) {
    const uint8_t* super = row_bytes + s * kQ6KBytes;
    for (int64_t line = 0; line < kQ6KBytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(super + kQ6KGroupedAhead + line), _MM_HINT_T1);
    const Q6KGroupedYmm block(super);
    const float d = half_to_float(load_u16(super + 208));
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first_row + r;
      const int8_t* codes = grouped + row * x.k + s * kSuperBlock;
      const int32_t* sums = x.row_sums(row, s);
      __m256i sum = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        const auto act = [&](int j) {
          return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * j + 32 * half));
        };
        const __m256i* v = block.codes[half];
        const __m256i first = _mm256_add_epi16(_mm256_maddubs_epi16(v[0], act(0)),
                                               _mm256_maddubs_epi16(v[1], act(1)));
        const __m256i second = _mm256_add_epi16(_mm256_maddubs_epi16(v[2], act(2)),
                                                _mm256_maddubs_epi16(v[3], act(3)));
        const __m256i group_sums =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + 8 * half));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(first, block.scale_pairs[half]));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(second, block.scale_pairs[half]));
        sum = _mm256_sub_epi32(sum, _mm256_madd_epi16(group_sums, block.offset_scale[half]));
      }
      dot[r] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d * x.scale(row, s)), dot[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float& o = out[(first_row + r) * n + c];
    o = (add ? o : 0.0f) + hsum(dot[r]);
  }
}
#endif

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
