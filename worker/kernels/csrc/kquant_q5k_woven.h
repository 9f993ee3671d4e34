// Q5_K weights woven once at load for the 8-bit gemv (kquant_gemv.h): eight rows a group, per
// super-block of 256 inputs 1408 bytes (the file's 8 x 176):
//   bytes 0-1151: a woven Q4_K super-block (kquant_format.h) of the codes' low four bits, with
//                 the file's d, dmin and sub-block scales and minimums;
//   bytes 1152-1407: the codes' fifth bits, 64 bytes per pair q of sub-blocks: bit 2 j + p of
//                 byte i is the fifth bit of code p (0: the low nibble, 1: the high one) of
//                 byte i of the pair's run j (the 64 code bytes at 128 + 256 q + 64 j).
// Why: ggml weaves no Q5_K, and in the file's layout a vector of codes is one row's, so each
// row's sum needs its own reduction; woven, a vector holds eight rows (the columns of the
// output) and the Q4_K gemv's arithmetic applies as it is, each code taking its fifth bit
// with one shift and one mask. Every bit of the file is kept; the weave is scalar, the same
// bytes on every instruction set.
#pragma once

#include <cstdint>
#include <cstring>

#include "kquant_format.h"

namespace astrai {

constexpr int64_t kQ5KBytes = 176;  // block_q5_K: d, dmin, scales[12], qh[32], qs[128]
constexpr int64_t kQ5KWovenBytes = kTile * kQ5KBytes;
constexpr int64_t kQ5KFifthBits = kQ4KWovenBytes;  // where the fifth bits start

// Sub-block s's 6-bit scale and minimum from a K-quant's 12 packed bytes (ggml's
// get_scale_min_k4).
inline void k_quant_scale_min(int s, const uint8_t* packed, uint8_t* scale, uint8_t* minimum) {
  if (s < 4) {
    *scale = packed[s] & 63;
    *minimum = packed[s + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((packed[s + 4] & 0xF) | ((packed[s - 4] >> 6) << 4));
    *minimum = static_cast<uint8_t>((packed[s + 4] >> 4) | ((packed[s] >> 6) << 4));
  }
}

// One super-block of 8 rows of a Q5_K file (`rows[c]`: column c's 176 bytes) → woven.
inline void q5_k_weave_super(const uint8_t* const rows[kTile], uint8_t* out) {
  for (int c = 0; c < kTile; ++c) {
    std::memcpy(out + 2 * c, rows[c], 2);           // d
    std::memcpy(out + 16 + 2 * c, rows[c] + 2, 2);  // dmin
  }
  for (int s = 0; s < 8; ++s) {
    uint8_t sc[kTile], mn[kTile];
    for (int c = 0; c < kTile; ++c) k_quant_scale_min(s, rows[c] + 4, &sc[c], &mn[c]);
    uint8_t* b = out + 32 + 12 * s;
    for (int c = 0; c < 4; ++c) {
      b[c] = static_cast<uint8_t>(sc[c] | ((sc[c + 4] & 48) << 2));
      b[4 + c] = static_cast<uint8_t>(mn[c] | ((mn[c + 4] & 48) << 2));
      b[8 + c] = static_cast<uint8_t>((sc[c + 4] & 15) | ((mn[c + 4] & 15) << 4));
    }
  }
  // Run r of 8 bytes: column r % 8's code bytes 8 (r / 8) .. + 8 (the file's qs at 48).
  for (int r = 0; r < 128; ++r) std::memcpy(out + 128 + 8 * r, rows[r % 8] + 48 + 8 * (r / 8), 8);
  // The file's qh (at 16): code byte l's fifth bits of sub-blocks 2q and 2q + 1 are bits 2q
  // and 2q + 1 of qh[l % 32], l = 32 q + 8 j + b.
  uint8_t* fifth = out + kQ5KFifthBits;
  std::memset(fifth, 0, 4 * 64);
  for (int q = 0; q < 4; ++q)
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < kTile; ++c)
        for (int b = 0; b < 8; ++b) {
          const uint8_t high = rows[c][16 + 8 * j + b] >> (2 * q);
          fifth[64 * q + 8 * c + b] |= static_cast<uint8_t>((high & 3) << (2 * j));
        }
}

// A Q5_K weight as the file holds it (n rows, n % 8 == 0) → woven, group by group.
inline void q5_k_weave_group(const uint8_t* file, int64_t supers, int64_t group, uint8_t* out) {
  const uint8_t* rows[kTile];
  for (int64_t s = 0; s < supers; ++s) {
    for (int c = 0; c < kTile; ++c) rows[c] = file + ((group * kTile + c) * supers + s) * kQ5KBytes;
    q5_k_weave_super(rows, out + (group * supers + s) * kQ5KWovenBytes);
  }
}

}  // namespace astrai
