// Rows taken in runs whose length is a template argument: the kernels keep a run's sums in
// registers, so the count of rows in a run must be known when they are compiled.
#pragma once

#include <cstdint>
#include <utility>

namespace astrai {

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

}  // namespace astrai
