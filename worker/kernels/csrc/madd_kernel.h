// The Q4_1 direct kernel in 16-bit integers: activations quantized per block of 32 to int16,
// multiplied with the 4-bit codes by vpmaddwd (16 products and 8 pair sums per instruction).
//
// Why: the float kernel (direct_kernel.h) spends about four instructions per 8 products
// (unpack, convert, broadcast, FMA), and on a 2-core AVX2 EPYC that instruction stream, not
// memory, bounded it: one row ran at 16 GMAC/s on one core and only 20 on two. Here a mask
// and a shift unpack the codes of two inputs for 8 columns at once, as 16-bit lanes, and one
// vpmaddwd multiplies and pairs them: about half the instructions per product. int16 keeps
// the activations to 2^-16 of each block's largest value (int8, llama.cpp's choice, cut top-1
// agreement with the float32 model to 92% here).
//
// Per block and column: sum_i w_i x_i = d * s * sum_i code_i q_i + m * sum_i x_i, x ~ s * q.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "activations.h"
#include "block_format.h"

namespace astrai {

// Each block's 32 inputs as 16 words of two int16 each, in the order the kernel unpacks a
// record's codes: word 4j + v holds inputs (a, a + 2), a = 4j + kPairBase[v]; its codes are
// (lanes_j >> kPairShift[v]) & 0x000F000F (block_format.h: byte t of word j holds code 4j + t
// in its low nibble and 16 + 4j + t in its high one).
constexpr int kPairBase[4] = {0, 1, 16, 17};
constexpr int kPairShift[4] = {0, 8, 4, 12};

struct PairRows {
  std::vector<int32_t> pairs;  // (m, blocks, 16)
  std::vector<float> scales;   // (m, blocks): x ~ scale * q
  std::vector<float> sums;     // (m, blocks): the block's sum of x, the factor of its minimum
  int64_t blocks;
};

inline void quantize_block(const float* x, int32_t* pairs, float* scale, float* sum) {
  float amax = 0.0f, total = 0.0f;
  for (int i = 0; i < kBlock; ++i) {
    amax = std::max(amax, std::fabs(x[i]));
    total += x[i];
  }
  // A block of values too small to matter is zero, as in the float kernel's scaling.
  const float s = amax < 0x1p-100f ? 0.0f : amax / 32767.0f;
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  for (int j = 0; j < 4; ++j) {
    for (int v = 0; v < 4; ++v) {
      const int a = 4 * j + kPairBase[v];
      const auto lo = static_cast<uint16_t>(static_cast<int16_t>(std::lrint(x[a] * inv)));
      const auto hi = static_cast<uint16_t>(static_cast<int16_t>(std::lrint(x[a + 2] * inv)));
      pairs[4 * j + v] = static_cast<int32_t>(static_cast<uint32_t>(hi) << 16 | lo);
    }
  }
  *scale = s;
  *sum = total;
}

// x is (m, k), or (m, 2k) when the prologue is gated.
inline PairRows prepare_pair_rows(const float* x, int64_t m, int64_t k, const Prologue& pro) {
  const Rows plain = prepare_rows(x, m, k, false, pro, false);
  const int64_t blocks = k / kBlock;
  PairRows rows{std::vector<int32_t>(m * blocks * 16), std::vector<float>(m * blocks),
                std::vector<float>(m * blocks), blocks};
  for (int64_t rb = 0; rb < m * blocks; ++rb) {
    quantize_block(plain.x.data() + rb * kBlock, rows.pairs.data() + rb * 16,
                   rows.scales.data() + rb, rows.sums.data() + rb);
  }
  return rows;
}

#if defined(__AVX2__)
// out rows [row0, row0 + R), the 8 NT columns of NT consecutive tiles (records of tile k at
// records + k * run), over every block; the sums start from `init` or zero.
template <int R, int NT>
void madd_tile(const uint8_t* records, int64_t run, const PairRows& rows, int64_t row0,
               float* out, const float* init, int64_t out_stride) {
  // Two chains when few accumulators are in flight, so the adds do not wait on each other.
  constexpr int kChains = R * NT >= 4 ? 1 : 2;
  const int64_t blocks = rows.blocks;
  const __m256i mask = _mm256_set1_epi32(0x000F000F);
  float* o[R];
  for (int r = 0; r < R; ++r) {
    o[r] = out + (row0 + r) * out_stride;
    for (int n = 0; n < NT; ++n) {
      const __m256 start = init == nullptr ? _mm256_setzero_ps()
                                           : _mm256_loadu_ps(init + (row0 + r) * out_stride + 8 * n);
      _mm256_storeu_ps(o[r] + 8 * n, start);
    }
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* rec[NT];
    for (int n = 0; n < NT; ++n) {
      rec[n] = records + n * run + b * kQ4Record;
      for (int64_t line = 0; line < kQ4Record; line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(rec[n] + kPrefetchBytes + line), _MM_HINT_T0);
      }
    }
    const int32_t* p[R];
    for (int r = 0; r < R; ++r) p[r] = rows.pairs.data() + ((row0 + r) * blocks + b) * 16;
    __m256i acc[R][NT][kChains];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < NT; ++n)
        for (int a = 0; a < kChains; ++a) acc[r][n][a] = _mm256_setzero_si256();
    // Not unrolled: unrolled, the compiler unpacked every code of the block at once and
    // spilled them to the stack.
#pragma GCC unroll 1
    for (int j = 0; j < 4; ++j) {
      __m256i lanes[NT];
      for (int n = 0; n < NT; ++n) {
        lanes[n] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec[n] + 32 + 32 * j));
      }
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        __m256i codes[NT];
        for (int n = 0; n < NT; ++n) {
          codes[n] = _mm256_and_si256(_mm256_srli_epi32(lanes[n], kPairShift[v]), mask);
        }
        for (int r = 0; r < R; ++r) {
          const __m256i xi = _mm256_set1_epi32(p[r][4 * j + v]);
          for (int n = 0; n < NT; ++n) {
            __m256i& a = acc[r][n][v % kChains];
            a = _mm256_add_epi32(a, _mm256_madd_epi16(codes[n], xi));
            // Integer adds reassociate freely, and GCC turned the chains into trees of
            // products held on the stack; this keeps each accumulator one register.
            asm("" : "+x"(a));
          }
        }
      }
    }
    for (int n = 0; n < NT; ++n) {
      const __m256 d = load_halves(rec[n]);
      const __m256 mins = load_halves(rec[n] + 16);
      for (int r = 0; r < R; ++r) {
        __m256i total = acc[r][n][0];
        for (int a = 1; a < kChains; ++a) total = _mm256_add_epi32(total, acc[r][n][a]);
        const int64_t at = (row0 + r) * blocks + b;
        const __m256 dot = _mm256_mul_ps(_mm256_cvtepi32_ps(total), _mm256_set1_ps(rows.scales[at]));
        __m256 sum = _mm256_fmadd_ps(d, dot, _mm256_loadu_ps(o[r] + 8 * n));
        sum = _mm256_fmadd_ps(mins, _mm256_set1_ps(rows.sums[at]), sum);
        _mm256_storeu_ps(o[r] + 8 * n, sum);
      }
    }
  }
}

// Rows [begin, end) against NT consecutive tiles, in register tiles of <= 4 rows.
template <int NT>
void madd_rows(const uint8_t* records, int64_t run, const PairRows& rows, int64_t begin,
               int64_t end, float* out, const float* init, int64_t stride) {
  int64_t r = begin;
  for (; r + 4 <= end; r += 4) madd_tile<4, NT>(records, run, rows, r, out, init, stride);
  if (end - r == 3) madd_tile<3, NT>(records, run, rows, r, out, init, stride);
  if (end - r == 2) madd_tile<2, NT>(records, run, rows, r, out, init, stride);
  if (end - r == 1) madd_tile<1, NT>(records, run, rows, r, out, init, stride);
}
#endif

}  // namespace astrai
