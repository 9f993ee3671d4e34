// Q4_K weights woven by ggml, and Q5_K ones woven likewise at load (kquant_q5k_woven.h), times
// rows of activations in 8-bit integers (AVX-512 VNNI: kquant_gemv_zmm.h; AVX2:
// kquant_gemv_ymm.h), with the weights streamed ahead of the arithmetic; the activation rows'
// format, shared with the grouped Q6_K kernel (kquant_q6k_grouped.h).
//
// Why: at one to a few rows a decode step reads every weight once and does little with it, so
// it is bound by memory; ggml's gemv for these bytes stalls on each load before it computes
// (in cache it runs several times faster than from memory). Here the next super-blocks are
// prefetched while the current one is multiplied, and the codes unpacked once serve every
// row. As in ggml, the activations are rounded to 8 bits per 256 inputs (their sums per 32
// kept for the minimums), so the result is ggml's arithmetic, not the panels' float32.
#pragma once

#include <cstdint>

#include "kquant_rows.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
// The zmm forms of this gemv and of the grouped Q6_K one (kquant_q6k_grouped.h).
#define ASTRAI_KQUANT_GEMV_ZMM 1
#include "kquant_gemv_zmm.h"
#elif defined(__AVX2__)
#include "kquant_gemv_ymm.h"
#endif

#if defined(__AVX2__)
// The gemv in either form (Q4_K and Q5_K here, Q6_K in kquant_q6k_grouped.h).
#define ASTRAI_KQUANT_GEMV 1
namespace astrai {

// out (m, n) = x (m, k) times the woven Q4_K weight (n / 8 groups, k / 256, 1152 bytes) or,
// where kFive, Q5_K one (1408 bytes), for groups [first, last); rows eight at a time (a
// group's bytes stay in L1/L2 between them).
template <bool kFive>
inline void woven_gemv_groups(const uint8_t* weights, int64_t supers, const QuantizedRows& x,
                              int64_t m, int64_t first, int64_t last, float* out, int64_t n) {
  for (int64_t g = first; g < last; ++g) {
    in_runs_of<8>(m, [&]<int kRows>(int64_t row) {
      woven_gemv_group<kRows, kFive>(weights, supers, g, x, row, out, n);
    });
  }
}

}  // namespace astrai
#endif
