// Block-quantized matrix multiplication on the CPU: GGUF Q4_1 and Q8_0 weights times float32
// activations, the weights unpacked to float32 in registers.
//
// Why: a decode step of a small model reads every weight once per token, and 4-bit weights are
// an eighth of float32's bytes. The activations stay float32: quantizing them to 8 bits per
// block of 32 (llama.cpp's scheme, tried first) cut top-1 agreement with the float32 model to
// 92%, where this keeps it exact up to summation order; and on an AVX2 CPU the FMA units, not
// the integer ones, are the wider path. This file is built with -march=native on the machine
// that runs it (worker/kernels/build.py); the scalar branch keeps any other CPU correct.
//
// Weight layout (worker/kernels/layout.py writes it): output features in tiles of 8, and per
// tile and block of 32 inputs one record, so that one sequential stream feeds the kernel (four
// separate row streams ran 2.5x slower on an AVX2 EPYC: its prefetchers do not follow them):
//   Q4_1 (160 bytes): fp16 d[8], fp16 m[8], then 4 groups j of 32 bytes: for each column c, a
//        32-bit word whose byte t holds code 4j+t in its low and code 16+4j+t in its high
//        nibble; w = d * code + m, code in 0..15.
//   Q8_0 (272 bytes): fp16 d[8], then 8 groups g of 32 bytes: for each column c, a 32-bit word
//        whose byte t is code 4g+t as int8; w = d * code, code in -127..127.
// Read as eight 32-bit lanes, a group yields by shift and mask the codes of one input for all
// 8 columns at once: one FMA with that input broadcast advances 8 outputs, a block ends with
// one scale multiply for 8 outputs, and no horizontal sums are ever needed.
//   sum_i w_i x_i = d * sum_i code_i x_i + m * sum_i x_i   (per block, per column)

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "activations.h"
#include "parallel.h"
#include "vec_math.h"

namespace astrai {
namespace {

constexpr int64_t kTile = 8;  // output features per record
constexpr int64_t kQ4Record = 160;
constexpr int64_t kQ8Record = 272;
constexpr int64_t kPanelRows = 64;
constexpr int64_t kPrefetchBytes = 2048;  // activation rows kept in L2 while the weights stream by

#if defined(__AVX2__)
inline __m256 load_halves(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 8 columns' codes of input `i` of a block, as floats times 2^(8 (i % 4)) (Q4_1) or 2^24.
template <bool kQ8>
inline __m256 codes_of(const uint8_t* rec, int i) {
  const int t = i % 4;
  if constexpr (kQ8) {
    const __m256i lanes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 16 + 32 * (i / 4)));
    const __m256i top = t == 3 ? lanes : _mm256_slli_epi32(lanes, 24 - 8 * t);
    return _mm256_cvtepi32_ps(_mm256_and_si256(top, _mm256_set1_epi32(static_cast<int>(0xFF000000u))));
  } else {
    __m256i lanes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 32 + 32 * ((i % 16) / 4)));
    if (i >= 16) lanes = _mm256_srli_epi32(lanes, 4);  // the compiler shares it across t
    return _mm256_cvtepi32_ps(_mm256_and_si256(lanes, _mm256_set1_epi32(0x0F << (8 * t))));
  }
}

// Independent sums per row: enough in flight to cover the FMA latency (measured on Zen 3:
// one row with 4 chains ran 1.4x faster than with 1 or 8).
template <int R>
constexpr int chains() {
  return R == 1 ? 4 : R == 2 ? 4 : 2;
}

// out rows [row0, row0 + R), the 8 columns of one tile, over every block of the records.
template <int R, bool kQ8>
void tile(const uint8_t* records, const Rows& rows, int64_t row0, int64_t blocks, float* out,
          int64_t out_stride) {
  constexpr int kChains = chains<R>();
  const float* x[R];
  float* o[R];
  for (int r = 0; r < R; ++r) {
    x[r] = rows.x.data() + (row0 + r) * rows.k;
    o[r] = out + (row0 + r) * out_stride;
    _mm256_storeu_ps(o[r], _mm256_setzero_ps());
  }
  constexpr int64_t kRecord = kQ8 ? kQ8Record : kQ4Record;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* rec = records + b * kRecord;
    // The hardware prefetchers alone left one core at 6.7 of its 9 GB/s streaming records
    // from memory; asking for the lines 2 KB ahead brought it to 8.7 (AVX2 EPYC, measured).
    for (int64_t line = 0; line < kRecord; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(rec + kPrefetchBytes + line), _MM_HINT_T0);
    }
    __m256 part[R][kChains];
    for (int r = 0; r < R; ++r)
      for (int a = 0; a < kChains; ++a) part[r][a] = _mm256_setzero_ps();
#pragma GCC unroll 32
    for (int i = 0; i < kBlock; ++i) {
      const __m256 w = codes_of<kQ8>(rec, i);
      for (int r = 0; r < R; ++r) {
        const __m256 xi = _mm256_broadcast_ss(x[r] + b * kBlock + i);
        part[r][i % kChains] = _mm256_fmadd_ps(w, xi, part[r][i % kChains]);
      }
    }
    // The running sums live in the output rows (L1), not in registers: the 32 FMAs above
    // need every register, and spilling their chains cost more than this load and store.
    const __m256 d = load_halves(rec);
    for (int r = 0; r < R; ++r) {
      __m256 sum = part[r][0];
      for (int a = 1; a < kChains; ++a) sum = _mm256_add_ps(sum, part[r][a]);
      __m256 acc = _mm256_fmadd_ps(d, sum, _mm256_loadu_ps(o[r]));
      if constexpr (!kQ8) {
        const float s = rows.sums[(row0 + r) * blocks + b];
        acc = _mm256_fmadd_ps(load_halves(rec + 16), _mm256_set1_ps(s), acc);
      }
      _mm256_storeu_ps(o[r], acc);
    }
  }
}
#else
template <int R, bool kQ8>
void tile(const uint8_t* records, const Rows& rows, int64_t row0, int64_t blocks, float* out,
          int64_t out_stride) {
  for (int r = 0; r < R; ++r) {
    const float* x = rows.x.data() + (row0 + r) * rows.k;
    float acc[kTile] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* rec = records + b * (kQ8 ? kQ8Record : kQ4Record);
      for (int c = 0; c < kTile; ++c) {
        float part = 0.0f;
        for (int i = 0; i < kBlock; ++i) {
          int code;
          if constexpr (kQ8) {
            code = static_cast<int8_t>(rec[16 + 32 * (i / 4) + 4 * c + i % 4]);
          } else {
            const uint8_t byte = rec[32 + 32 * ((i % 16) / 4) + 4 * c + i % 4];
            code = i < 16 ? (byte & 0x0F) : (byte >> 4);
          }
          // x was scaled by input_scale(i); undo it here, where speed does not matter.
          part += static_cast<float>(code) * (x[b * kBlock + i] / input_scale(i, kQ8));
        }
        acc[c] += half_to_float(load_u16(rec + 2 * c)) * part;
        if constexpr (!kQ8) {
          acc[c] += half_to_float(load_u16(rec + 16 + 2 * c)) * rows.sums[(row0 + r) * blocks + b];
        }
      }
    }
    for (int c = 0; c < kTile; ++c) out[(row0 + r) * out_stride + c] = acc[c];
  }
}
#endif

// Rows [begin, end) of x against one tile's records, in register tiles of up to 4 rows.
template <bool kQ8>
void tile_rows(const uint8_t* records, const Rows& rows, int64_t begin, int64_t end,
               int64_t blocks, float* out, int64_t stride) {
  int64_t r = begin;
  for (; r + 4 <= end; r += 4) tile<4, kQ8>(records, rows, r, blocks, out, stride);
  if (end - r == 3) tile<3, kQ8>(records, rows, r, blocks, out, stride);
  if (end - r == 2) tile<2, kQ8>(records, rows, r, blocks, out, stride);
  if (end - r == 1) tile<1, kQ8>(records, rows, r, blocks, out, stride);
}

template <bool kQ8>
at::Tensor block_linear(const at::Tensor& x, const at::Tensor& weight, int64_t out_features,
                        const c10::optional<at::Tensor>& bias,
                        const c10::optional<at::Tensor>& residual,
                        const c10::optional<at::Tensor>& norm_weight, double eps, bool gated) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "x must be (rows, in) float32");
  TORCH_CHECK(weight.scalar_type() == at::kByte && weight.dim() == 3 && weight.is_contiguous(),
              "weight must be a contiguous (tiles, blocks, record) uint8 tensor");
  const int64_t record = kQ8 ? kQ8Record : kQ4Record;
  const int64_t m = x.size(0), n = out_features, tiles = weight.size(0), blocks = weight.size(1);
  const int64_t k = blocks * kBlock;
  TORCH_CHECK(weight.size(2) == record, "weight records must be ", record, " bytes");
  TORCH_CHECK(x.size(1) == (gated ? 2 * k : k), "x has ", x.size(1), " columns, the weight takes ",
              k, gated ? " (times 2: gate and up)" : "");
  TORCH_CHECK(n <= tiles * kTile && n > (tiles - 1) * kTile,
              "out_features ", n, " does not match ", tiles, " tiles of ", kTile);
  at::Tensor norm;
  if (norm_weight.has_value()) {
    norm = norm_weight->to(at::kFloat).contiguous();
    TORCH_CHECK(norm.numel() == k, "norm_weight must have in_features elements");
  }
  const at::Tensor input = x.contiguous();
  // Padded to whole tiles; the columns past out_features are dropped by the narrow below.
  at::Tensor out = at::empty({m, tiles * kTile}, x.options());
  if (m > 0) {
    const Prologue pro{gated, norm.defined() ? norm.data_ptr<float>() : nullptr,
                       static_cast<float>(eps)};
    const Rows rows = prepare_rows(input.data_ptr<float>(), m, k, kQ8, pro);
    const uint8_t* w = weight.data_ptr<uint8_t>();
    float* o = out.data_ptr<float>();
    const int64_t stride = tiles * kTile;
    // Chunks of ~32 KB of weights: small enough to balance, large enough to stream.
    const int64_t chunk = std::max<int64_t>(1, 32768 / (blocks * record));
    for (int64_t panel = 0; panel < m; panel += kPanelRows) {
      const int64_t end_row = std::min(m, panel + kPanelRows);
      parallel_chunks(tiles, chunk, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          tile_rows<kQ8>(w + t * blocks * record, rows, panel, end_row, blocks, o + t * kTile, stride);
        }
      });
    }
  }
  at::Tensor result = n == tiles * kTile ? out : out.narrow(1, 0, n).contiguous();
  if (bias.has_value()) result.add_(*bias);
  if (residual.has_value()) result.add_(*residual);
  return result;
}

}  // namespace

// out = prologue(x) @ weight.T (+ bias) (+ residual), prologue = [silu(gate) * up] then
// [RMSNorm(norm_weight, eps)]: a decoder layer's norm, gate and residual add, fused.
TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def(
      "q4_1_linear(Tensor x, Tensor weight, int out_features, Tensor? bias, Tensor? residual, "
      "Tensor? norm_weight, float eps, bool gated) -> Tensor");
  m.def(
      "q8_0_linear(Tensor x, Tensor weight, int out_features, Tensor? bias, Tensor? residual, "
      "Tensor? norm_weight, float eps, bool gated) -> Tensor");
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) {
  m.impl("q4_1_linear", &block_linear<false>);
  m.impl("q8_0_linear", &block_linear<true>);
}

}  // namespace astrai
