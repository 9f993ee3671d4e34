// One head's RoPE, rotate-half convention, with torch's bits: defined in rope.cpp, which is
// compiled without fused multiply-adds, so a key rotated at a decode step is the same key a
// prompt chunk (astrai::rope) and torch's apply_rope give.
#pragma once

#include <cstdint>

namespace astrai {

// x (D,) rotated by one position's angles cos, sin (D,) into out (D,); D even.
void rope_head(const float* x, const float* cos, const float* sin, int64_t dim, float* out);

}  // namespace astrai
