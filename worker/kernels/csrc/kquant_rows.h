// The activation rows of the 8-bit K-quant gemv (kquant_gemv.h), as both its instruction-set
// forms and the grouped Q6_K kernel read them, and how rows are taken in runs.
#pragma once

#include <cstdint>
#include <utility>

#include "kquant_format.h"

namespace astrai {

// Activation rows as 8-bit integers: per row and super-block a scale, per 16 inputs a sum,
// and the sums per 32 inputs as 16-bit pairs (word p of a super-block: sub-blocks 2p, 2p + 1).
struct QuantizedRows {
  const int8_t* codes;       // (rows, k)
  const float* scales;       // (rows, k / 256)
  const int32_t* sums;       // (rows, k / 16)
  const int32_t* pair_sums;  // (rows, k / 64)
  int64_t k;

  const int8_t* row_codes(int64_t row) const { return codes + row * k; }
  float scale(int64_t row, int64_t super) const { return scales[row * (k / kSuperBlock) + super]; }
  const int32_t* row_sums(int64_t row, int64_t super) const {
    return sums + row * (k / 16) + 16 * super;
  }
  const int32_t* row_pair_sums(int64_t row, int64_t super) const {
    return pair_sums + row * (k / 64) + 4 * super;
  }
};

// run<kRows>(row) for the last `left` rows from `row`, left < kRows + 1.
template <int kRows, typename F>
inline void the_rest(int64_t left, int64_t row, const F& run) {
  if constexpr (kRows > 0) {
    if (left == kRows) {
      run.template operator()<kRows>(row);
    } else {
      the_rest<kRows - 1>(left, row, run);
    }
  }
}

// run<kRows>(first row) over rows [0, m): kMax at a time, then the fewer left (the kernels
// keep kRows rows' sums in registers, so their count is a template argument).
template <int kMax, typename F>
inline void in_runs_of(int64_t m, const F& run) {
  int64_t row = 0;
  for (; row + kMax <= m; row += kMax) run.template operator()<kMax>(row);
  the_rest<kMax - 1>(m - row, row, run);
}

// f.template operator()<I>() for I = 0 .. kCount - 1 in turn: a loop whose index the body
// needs as a constant (an instruction's immediate operand).
template <int kCount, typename F>
inline void for_each_index(const F& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    (f.template operator()<I>(), ...);
  }(std::make_integer_sequence<int, kCount>{});
}

// Bytes ahead of the super-block being multiplied that are requested from memory: enough to
// cover the memory's latency at its bandwidth, little enough to stay in L1.
constexpr int64_t kPrefetchSupers = 8;

}  // namespace astrai
