// The activation rows of the 8-bit K-quant gemv (kquant_gemv.h), as both its instruction-set
// forms and the grouped Q6_K kernel read them.
#pragma once

#include <cstdint>

#include "kquant_format.h"
#include "row_runs.h"

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

// Bytes ahead of the super-block being multiplied that are requested from memory: enough to
// cover the memory's latency at its bandwidth, little enough to stay in L1.
constexpr int64_t kPrefetchSupers = 8;

}  // namespace astrai
