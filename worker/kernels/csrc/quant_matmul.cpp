// The block-quantized linear layer on the CPU: GGUF Q4_1, Q8_0, Q5_0 or Q5_1 weights times
// activations, with a decoder layer's RMSNorm, SwiGLU gate and residual add fused around it.
//
// Why: a decode step of a small model reads every weight once per token, and 4-bit weights are
// an eighth of float32's bytes. Two arithmetics: the activations rounded to 8 bits per block
// of 32 (`int8`: llama.cpp's, int8_kernel.h and its AVX512-VNNI form int8_kernel_zmm.h, the
// default for a GGUF) or kept float32 (exact to the file up to summation order: --precision
// exact, and a folder's weights). Built with
// -march=native on the machine that runs it (worker/kernels/build.py); the scalar branches
// keep any other CPU correct.
//
// Q5_0 and Q5_1 records run with 8-bit activations only (q5_kernel.h). With float32
// activations few rows go through the direct kernel (direct_kernel.h), from `panel_rows` rows
// on through the panel kernel (panel_kernel.h; on AMX, amx_panel_kernel.h); the probe
// (worker/kernels/plan.py) measures where.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "activations.h"
#include "block_format.h"
#include "direct_kernel.h"
#include "int8_kernel.h"
#include "int8_kernel_zmm.h"
#include "ops.h"
#include "panel_matmul.h"
#include "parallel.h"
#include "q5_kernel.h"
#include "row_runs.h"
#include "wide_direct_kernel.h"

namespace astrai {
namespace {

constexpr int64_t kPanelRows = 64;  // rows per pass of the direct kernel, kept in L2

template <bool kQ8>
void direct(const at::Tensor& input, const Prologue& pro, const uint8_t* w, int64_t tiles,
            int64_t blocks, float* out, const float* init) {
  const int64_t m = input.size(0), k = blocks * kBlock, record = record_bytes<kQ8>();
  const Rows rows = prepare_rows(input.data_ptr<float>(), m, k, kQ8, pro, true);
  const int64_t stride = tiles * kTile;
  // Chunks of ~32 KB of weights: small enough to balance, large enough to stream.
  const int64_t chunk = std::max<int64_t>(1, 32768 / (blocks * record));
  const int64_t run = blocks * record;
  // Tiles in pairs share each input's broadcast, which bounds the kernel from 2 rows on; one
  // row is memory bound instead, and one sequential stream of records suits it better.
  const int64_t width = m == 1 ? 1 : 2;
  const int64_t groups = (tiles + width - 1) / width;
  for (int64_t pass = 0; pass < m; pass += kPanelRows) {
    const int64_t end_row = std::min(m, pass + kPanelRows);
    parallel_chunks(groups, std::max<int64_t>(1, chunk / width), [&](int64_t begin, int64_t end) {
      // The kernel prefetches a fixed distance ahead within a chunk, so a chunk's own first
      // records would arrive one miss at a time: ask for them all at once.
      const uint8_t* first = w + width * begin * run;
      const int64_t head = std::min(kPrefetchBytes, (end - begin) * width * run);
      for (int64_t line = 0; line < head; line += 64) __builtin_prefetch(first + line, 0, 3);
      for (int64_t g = begin; g < end; ++g) {
        const int64_t t = width * g;
        float* o = out + t * kTile;
        const float* start = init == nullptr ? nullptr : init + t * kTile;
        if (width == 2 && t + 1 < tiles) {
#if defined(__AVX512F__)
          tile_rows_pair<kQ8>(w + t * run, run, rows, pass, end_row, blocks, o, start, stride);
#else
          tile_rows<kQ8, 2>(w + t * run, run, rows, pass, end_row, blocks, o, start, stride);
#endif
        } else {
          tile_rows<kQ8, 1>(w + t * run, run, rows, pass, end_row, blocks, o, start, stride);
        }
      }
    });
  }
}

// The rows after their prologue, rounded to 8 bits per block (in parallel, row by row),
// then each tile's records (or pair of tiles') times all of them, a few rows a pass.
template <Records kFormat>
void int8_direct(const at::Tensor& input, const Prologue& pro, const uint8_t* w, int64_t tiles,
                 int64_t blocks, float* out, const float* init) {
  const int64_t m = input.size(0), k = blocks * kBlock, per_row = k / kBlock;
  const Rows prepared = prepare_rows(input.data_ptr<float>(), m, k, false, pro, false);
  int8_t* codes = reinterpret_cast<int8_t*>(scratch(Scratch::kInt8Codes, (m * k + 3) / 4));
  float* scales = scratch(Scratch::kInt8Scales, m * per_row);
  float* sums = scratch(Scratch::kInt8Sums, m * per_row);
  int32_t* totals = reinterpret_cast<int32_t*>(scratch(Scratch::kInt8Totals, m * per_row));
  parallel_chunks(m, std::max<int64_t>(1, 8192 / k), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      quantize_row_int8(prepared.x + r * k, k, codes + r * k, scales + r * per_row,
                        sums + r * per_row, totals + r * per_row);
  });
  const Int8Rows rows{codes, scales, sums, totals, k};
  const int64_t run = blocks * record_bytes(kFormat), stride = tiles * kTile;
#if defined(__AVX2__)
  // One tile's records times every row, four rows a pass: a record's codes are unpacked once
  // for all the rows of a pass.
  auto one_tile = [&](int64_t t) {
    const uint8_t* records = w + t * run;
    float* o = out + t * kTile;
    const float* start = init == nullptr ? nullptr : init + t * kTile;
    in_runs_of<4>(m, [&]<int R>(int64_t r) {
      if constexpr (int8_only(kFormat)) {
        five_bit_tile<kFormat == Records::kQ5_1, R>(records, blocks, rows, r, o, start, stride);
      } else {
        int8_tile<kFormat == Records::kQ8_0, R>(records, blocks, rows, r, o, start, stride);
      }
    });
  };
#endif
#if defined(ASTRAI_INT8_ZMM)
  // Tiles in pairs (int8_kernel_zmm.h), an odd count's last tile alone. Up to eight rows (a
  // decode step) each pair reads its records as it goes; more rows take two pairs at a time,
  // unpacked once for all the rows, seven rows a pass.
  const int64_t pairs = (tiles + 1) / 2, width = m <= 8 ? 1 : 2;
  const int64_t groups = (pairs + width - 1) / width;
  const int64_t chunk =
      std::max<int64_t>(1, std::min(chunk_for(groups, 1, 32), 16384 / (width * run)));
  parallel_chunks(groups, chunk, [&](int64_t begin, int64_t end) {
    thread_local std::vector<PairBlock> unpacked;
    for (int64_t group = begin; group < end; ++group) {
      const int64_t t = 2 * width * group;
      float* o = out + t * kTile;
      const float* start = init == nullptr ? nullptr : init + t * kTile;
      if (width == 2 && t + 3 < tiles) {
        unpacked.resize(2 * blocks);
        unpack_pair<kFormat>(w + t * run, w + (t + 1) * run, blocks, unpacked.data());
        unpack_pair<kFormat>(w + (t + 2) * run, w + (t + 3) * run, blocks,
                             unpacked.data() + blocks);
        const PairBlock* const both[2] = {unpacked.data(), unpacked.data() + blocks};
        in_runs_of<7>(m, [&]<int R>(int64_t r) {
          int8_unpacked_tiles<kFormat, R, 2>(both, blocks, rows, r, o, start, stride);
        });
        continue;
      }
      for (int64_t u = t; u < std::min(t + 2 * width, tiles); u += 2) {
        float* uo = out + u * kTile;
        const float* us = init == nullptr ? nullptr : init + u * kTile;
        if (u + 1 == tiles) {
          one_tile(u);
          continue;
        }
        const RecordPair<kFormat> records{w + u * run, w + (u + 1) * run};
        in_runs_of<8>(m, [&]<int R>(int64_t r) {
          int8_tile_pair<kFormat, R>(records, blocks, rows, r, uo, us, stride);
        });
      }
    }
  });
#elif defined(__AVX2__)
  const int64_t chunk = std::max<int64_t>(1, std::min(chunk_for(tiles, 1, 64), 32768 / run));
  parallel_chunks(tiles, chunk, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) one_tile(t);
  });
#endif
}

// The kernel for these rows: 8-bit activations (every row count), else the panel kernel for
// many rows or the direct kernel for few (float32 activations: not for Q5_0 / Q5_1 records).
template <Records kFormat>
void compute(const at::Tensor& input, const Prologue& pro, const uint8_t* w, int64_t tiles,
             int64_t blocks, float* out, const float* init, bool int8, bool direct_path) {
#if defined(__AVX2__)
  if (int8) return int8_direct<kFormat>(input, pro, w, tiles, blocks, out, init);
#else
  TORCH_CHECK(!int8, "8-bit activations need AVX2");
#endif
  if constexpr (!int8_only(kFormat)) {
    constexpr bool kQ8 = kFormat == Records::kQ8_0;
#if defined(__AVX2__)
    if (!direct_path) {
      const int64_t m = input.size(0), k = blocks * kBlock;
      const Rows rows = prepare_rows(input.data_ptr<float>(), m, k, kQ8, pro, false);
      return panel_matmul(RecordSource<kQ8>{w, blocks}, rows.x, m, tiles, blocks, out);
    }
#endif
    direct<kQ8>(input, pro, w, tiles, blocks, out, init);
  }
}

}  // namespace

template <Records kFormat>
at::Tensor block_linear(const at::Tensor& x, const at::Tensor& weight, int64_t out_features,
                        const c10::optional<at::Tensor>& bias,
                        const c10::optional<at::Tensor>& residual,
                        const c10::optional<at::Tensor>& norm_weight, double eps, bool gated,
                        int64_t panel_rows, bool int8) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "x must be (rows, in) float32");
  TORCH_CHECK(weight.scalar_type() == at::kByte && weight.dim() == 3 && weight.is_contiguous(),
              "weight must be a contiguous (tiles, blocks, record) uint8 tensor");
  const int64_t m = x.size(0), n = out_features, tiles = weight.size(0), blocks = weight.size(1);
  const int64_t k = blocks * kBlock;
  TORCH_CHECK(weight.size(2) == record_bytes(kFormat), "weight records must be ",
              record_bytes(kFormat), " bytes");
  TORCH_CHECK(int8 || !int8_only(kFormat), "Q5_0 and Q5_1 records take 8-bit activations only");
  TORCH_CHECK(x.size(1) == (gated ? 2 * k : k), "x has ", x.size(1), " columns, the weight takes ",
              k, gated ? " (times 2: gate and up)" : "");
  TORCH_CHECK(n <= tiles * kTile && n > (tiles - 1) * kTile, "out_features ", n, " does not match ",
              tiles, " tiles of ", kTile);
  at::Tensor norm;
  if (norm_weight.has_value()) {
    norm = norm_weight->to(at::kFloat).contiguous();
    TORCH_CHECK(norm.numel() == k, "norm_weight must have in_features elements");
  }
  const at::Tensor input = x.contiguous();
  // Padded to whole tiles; the columns past out_features are dropped by the narrow below.
  at::Tensor out = at::empty({m, tiles * kTile}, x.options());
  // The direct kernel starts its sums from the residual (no separate add pass) when the
  // residual is laid out as its output is: float32, contiguous, no padding columns.
  at::Tensor init;
  const bool direct_path = int8 || !(panel_rows > 0 && m >= panel_rows);
  if (residual.has_value() && direct_path && n == tiles * kTile &&
      residual->scalar_type() == at::kFloat && residual->sizes() == out.sizes()) {
    init = residual->contiguous();
  }
  if (m > 0) {
    const Prologue pro{gated, norm.defined() ? norm.data_ptr<float>() : nullptr,
                       static_cast<float>(eps)};
    float* o = out.data_ptr<float>();
    compute<kFormat>(input, pro, weight.data_ptr<uint8_t>(), tiles, blocks, o,
                     init.defined() ? init.data_ptr<float>() : nullptr, int8, direct_path);
  }
  at::Tensor result = n == tiles * kTile ? out : out.narrow(1, 0, n).contiguous();
  if (bias.has_value()) result.add_(*bias);
  if (residual.has_value() && !init.defined()) result.add_(*residual);
  return result;
}

#define ASTRAI_BLOCK_LINEAR(format)                                                              \
  template at::Tensor block_linear<format>(                                                      \
      const at::Tensor&, const at::Tensor&, int64_t, const c10::optional<at::Tensor>&,           \
      const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, double, bool, int64_t, \
      bool);
ASTRAI_BLOCK_LINEAR(Records::kQ4_1)
ASTRAI_BLOCK_LINEAR(Records::kQ8_0)
ASTRAI_BLOCK_LINEAR(Records::kQ5_0)
ASTRAI_BLOCK_LINEAR(Records::kQ5_1)
#undef ASTRAI_BLOCK_LINEAR

// Which instructions the block kernels run on here, for the startup log.
std::string block_kernel_isa() {
#if defined(ASTRAI_AMX)
  if (amx_ready()) return "AMX tiles (many rows), AVX-512";
#endif
#if defined(__AVX512F__)
  return "AVX-512";
#elif defined(__AVX2__)
  return "AVX2";
#else
  return "scalar";
#endif
}

// out = prologue(x) @ weight.T (+ bias) (+ residual), prologue = [silu(gate) * up] then
// [RMSNorm(norm_weight, eps)]: a decoder layer's norm, gate and residual add, fused.
// panel_rows: from this many rows on, the panel kernel (0: never); int8: every row count on
// 8-bit activations instead (int8_kernel.h: the file's own arithmetic, as ggml computes it).
TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def(
      "q4_1_linear(Tensor x, Tensor weight, int out_features, Tensor? bias, Tensor? residual, "
      "Tensor? norm_weight, float eps, bool gated, int panel_rows, bool int8=False) -> Tensor");
  m.def(
      "q8_0_linear(Tensor x, Tensor weight, int out_features, Tensor? bias, Tensor? residual, "
      "Tensor? norm_weight, float eps, bool gated, int panel_rows, bool int8=False) -> Tensor");
  m.def(
      "q5_0_linear(Tensor x, Tensor weight, int out_features, Tensor? bias, Tensor? residual, "
      "Tensor? norm_weight, float eps, bool gated, int panel_rows, bool int8=True) -> Tensor");
  m.def(
      "q5_1_linear(Tensor x, Tensor weight, int out_features, Tensor? bias, Tensor? residual, "
      "Tensor? norm_weight, float eps, bool gated, int panel_rows, bool int8=True) -> Tensor");
  m.def("block_kernel_isa() -> str", &block_kernel_isa);  // no tensors: one kernel for all
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) {
  m.impl("q4_1_linear", &block_linear<Records::kQ4_1>);
  m.impl("q8_0_linear", &block_linear<Records::kQ8_0>);
  m.impl("q5_0_linear", &block_linear<Records::kQ5_0>);
  m.impl("q5_1_linear", &block_linear<Records::kQ5_1>);
}

}  // namespace astrai
