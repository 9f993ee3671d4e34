// The float32 attention kernels' building blocks, blocked for AVX-512: a block of query rows
// meets a block of 64 keys in registers, scores by broadcasting each query element against the
// transposed keys, the softmax online (a running max and sum per row), the values accumulated
// the same way. prefill_attention.cpp and shared_prefix_attention.cpp are built from them.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "parallel.h"
#include "row_runs.h"
#include "vec_math.h"

namespace astrai {

// Queries (KVH, R, D) and keys and values (T or cache rows, KVH, D) of the queries' KVH and D:
// float32, contiguous, D a multiple of 16; refused by name otherwise.
inline void check_attention_inputs(const at::Tensor& queries, const at::Tensor& keys,
                                   const at::Tensor& values) {
  TORCH_CHECK(queries.dim() == 3 && keys.dim() == 3 && values.sizes() == keys.sizes(),
              "queries (KVH, R, D), keys and values (T, KVH, D)");
  TORCH_CHECK(queries.scalar_type() == at::kFloat && keys.scalar_type() == at::kFloat &&
                  values.scalar_type() == at::kFloat,
              "float32 queries, keys and values");
  TORCH_CHECK(queries.is_contiguous() && keys.is_contiguous() && values.is_contiguous(),
              "contiguous queries, keys and values");
  TORCH_CHECK(keys.size(1) == queries.size(0) && keys.size(2) == queries.size(2) &&
                  queries.size(2) % 16 == 0,
              "keys (T, KVH, D) with the queries' KVH and D, D a multiple of 16");
}

// Row indices into a cache of `cache_rows` rows: contiguous int64, each within it.
inline void check_slots(const at::Tensor& slots, int64_t cache_rows, const char* name) {
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.is_contiguous(), name,
              ": contiguous int64 cache rows");
  TORCH_CHECK(slots.numel() == 0 ||
                  (slots.min().item<int64_t>() >= 0 && slots.max().item<int64_t>() < cache_rows),
              name, ": within the cache's rows");
}

#if defined(__AVX512F__)
// The vector the kernel is written in, and its micro-kernels' shapes: as many accumulators
// as the 32 registers hold beside the loads. (An AVX2 form, 6 x 16 scores and 4 x 16 values
// on 16 registers, lost to torch's kernel on long contexts: docs/bench/HISTORY.md, "The native
// causal prefill attention (twentieth session, 2026-12-03, AMD EPYC Zen 4)"; AVX2 CPUs keep
// torch's.)
struct Vec {
  using T = __m512;
  static constexpr int64_t kLanes = 16;
  static constexpr int64_t kScoreRows = 6, kScoreVectors = 4;  // 6 rows x 64 keys
  static constexpr int64_t kValueRows = 6, kValueVectors = 4;  // 6 rows x 64 of D
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T exp_minus(T x, T m) { return exp16(_mm512_sub_ps(x, m)); }
  static float sum(T v) { return _mm512_reduce_add_ps(v); }
  static float top(T v) { return _mm512_reduce_max_ps(v); }
};

using V = Vec::T;
// Query rows a task takes: each block of keys and values it reads (32 KB) serves them all,
// so more rows read the keys from farther caches fewer times.
constexpr int64_t kBlockRows = 192;
constexpr int64_t kKeys = 64;  // keys a block holds

// Where key t's row lies: row t of gathered keys, or the cache row slots[t] (read in place: a
// chunk after thousands of keys would otherwise copy them all first, each layer).
struct KeyRows {
  const float* base;     // (T or cache rows, KVH, D)
  int64_t stride;        // KVH * D
  const int64_t* slots;  // nullptr: row t is row t
  const float* row(int64_t t) const { return base + (slots ? slots[t] : t) * stride; }
  // Rows t .. t + n - 1 one after another (a page's, or gathered ones).
  bool consecutive(int64_t t, int64_t n) const {
    if (slots == nullptr) return true;
    for (int64_t j = 1; j < n; ++j) {
      if (slots[t + j] != slots[t] + j) return false;
    }
    return true;
  }
};

// scores[i][k0 .. k0 + NK lanes) = q_i . keys[j] for R rows; key_t (D, 64): the block's keys
// transposed, each query element broadcast against a row of it.
template <int R, int NK>
inline void block_scores(const float* q, int64_t dim, const float* key_t, int64_t k0,
                         float* scores) {
  V acc[R][NK];
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NK; ++c) acc[i][c] = Vec::zero();
  }
  for (int64_t d = 0; d < dim; ++d) {
    V k[NK];
    for (int c = 0; c < NK; ++c) k[c] = Vec::load(key_t + d * kKeys + k0 + c * Vec::kLanes);
    for (int i = 0; i < R; ++i) {
      const V b = Vec::set1(q[i * dim + d]);
      for (int c = 0; c < NK; ++c) acc[i][c] = Vec::fma(b, k[c], acc[i][c]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NK; ++c) Vec::store(scores + i * kKeys + k0 + c * Vec::kLanes, acc[i][c]);
  }
}

// out_i[d0 .. d0 + NV lanes) += sum_j probs[i][j] values[j][d0 ..], over `keys` keys, R rows;
// values[j] points at key j's row, at d0.
template <int R, int NV>
inline void block_values(const float* probs, const float* const* values, int64_t d0, int64_t keys,
                         float* out, int64_t out_stride) {
  V acc[R][NV];
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NV; ++c) acc[i][c] = Vec::load(out + i * out_stride + c * Vec::kLanes);
  }
  for (int64_t j = 0; j < keys; ++j) {
    V v[NV];
    for (int c = 0; c < NV; ++c) v[c] = Vec::load(values[j] + d0 + c * Vec::kLanes);
    for (int i = 0; i < R; ++i) {
      const V p = Vec::set1(probs[i * kKeys + j]);
      for (int c = 0; c < NV; ++c) acc[i][c] = Vec::fma(p, v[c], acc[i][c]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NV; ++c) Vec::store(out + i * out_stride + c * Vec::kLanes, acc[i][c]);
  }
}

template <int R>
void rows_scores(const float* q, int64_t dim, const float* key_t, float* scores) {
  constexpr int64_t step = Vec::kScoreVectors * Vec::kLanes;
  for (int64_t k0 = 0; k0 < kKeys; k0 += step) {
    block_scores<R, Vec::kScoreVectors>(q, dim, key_t, k0, scores);
  }
}

template <int R>
void rows_values(const float* probs, const float* const* values, int64_t keys, int64_t dim,
                 float* out) {
  constexpr int64_t step = Vec::kValueVectors * Vec::kLanes;
  int64_t d0 = 0;
  for (; d0 + step <= dim; d0 += step) {
    block_values<R, Vec::kValueVectors>(probs, values, d0, keys, out + d0, dim);
  }
  for (; d0 < dim; d0 += Vec::kLanes) {
    block_values<R, 1>(probs, values, d0, keys, out + d0, dim);
  }
}

// key_t (T / 64 blocks, D, 64) of one kv head (its rows from `head` on): each block of keys
// transposed, zeros past T.
inline void transpose_keys(const KeyRows& keys, int64_t head, int64_t total, int64_t dim,
                           int64_t block, float* key_t) {
  const int64_t key0 = block * kKeys, n = std::min(kKeys, total - key0);
  float* out = key_t + block * dim * kKeys;
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t rows = std::min<int64_t>(16, n - j);
    if (rows == 16 && keys.consecutive(key0 + j, 16)) {
      const float* first = keys.row(key0 + j) + head;
      for (int64_t d = 0; d < dim; d += 16)
        transpose16(first + d, keys.stride, out + d * kKeys + j, kKeys);
      continue;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = keys.row(key0 + j + r) + head;
      for (int64_t d = 0; d < dim; ++d) out[d * kKeys + j + r] = row[d];
    }
  }
  for (int64_t d = 0; d < dim; ++d) std::fill(out + d * kKeys + n, out + (d + 1) * kKeys, 0.f);
}

// Every kv head's keys, each block of 64 transposed (transpose_keys): (KVH, blocks * D * 64),
// once per call rather than once per block of query rows that reads them.
inline at::Tensor transpose_all_keys(const KeyRows& keys, int64_t kv_heads, int64_t total,
                                     int64_t dim, const at::TensorOptions& options) {
  const int64_t blocks = (total + kKeys - 1) / kKeys;
  at::Tensor key_t = at::empty({kv_heads, blocks * dim * kKeys}, options);
  float* out = key_t.data_ptr<float>();
  parallel_chunks(kv_heads * blocks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t head = task / blocks;
      transpose_keys(keys, head * dim, total, dim, task % blocks,
                     out + head * blocks * dim * kKeys);
    }
  });
  return key_t;
}

inline void scale_row(float* row, int64_t dim, float factor) {
  const V f = Vec::set1(factor);
  for (int64_t d = 0; d < dim; d += Vec::kLanes) {
    Vec::store(row + d, Vec::mul(Vec::load(row + d), f));
  }
}

// Row i's softmax over one block of scores s (its first `seen` keys visible), into p; the
// running max and sum updated, and the row's output rescaled to the new max. The block stays
// in registers: the keys it does not see are masked lanes, exactly zero in p.
inline void online_softmax(const float* s, float* p, int64_t seen, float& run_max, float& run_sum,
                           float* out, int64_t dim) {
  constexpr int kVectors = kKeys / 16;
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __mmask16 visible[kVectors];
  V x[kVectors];
  V top = minus_inf;
  for (int c = 0; c < kVectors; ++c) {
    const int64_t lanes = std::clamp<int64_t>(seen - 16 * c, 0, 16);
    visible[c] = static_cast<__mmask16>((1u << lanes) - 1);
    x[c] = _mm512_mask_loadu_ps(minus_inf, visible[c], s + 16 * c);
    top = Vec::max(top, x[c]);
  }
  const float new_max = std::max(run_max, Vec::top(top));
  // 0 for the first block; 1, and no rescaling, while the maximum holds.
  const float rescale = new_max == run_max ? 1.f : std::exp(run_max - new_max);
  const V m = Vec::set1(new_max);
  V sum = Vec::zero();
  for (int c = 0; c < kVectors; ++c) {
    const V e = _mm512_maskz_mov_ps(visible[c], Vec::exp_minus(x[c], m));
    Vec::store(p + 16 * c, e);
    sum = Vec::add(sum, e);
  }
  run_sum = run_sum * rescale + Vec::sum(sum);
  run_max = new_max;
  if (rescale != 1.f) scale_row(out, dim, rescale);
}

// A task's query rows (at most kBlockRows) attending block of keys by block: each row's
// running max and sum, a block's scores and probabilities, and its output (zeroed here).
struct AttendingRows {
  const float* q;  // (rows, D), pre-scaled by D^-0.5
  float* out;      // (rows, D)
  int64_t rows, dim;
  float scores[kBlockRows * kKeys], probs[kBlockRows * kKeys];
  float run_max[kBlockRows], run_sum[kBlockRows];

  AttendingRows(const float* q_, float* out_, int64_t rows_, int64_t dim_)
      : q(q_), out(out_), rows(rows_), dim(dim_) {
    std::fill(run_max, run_max + rows, -std::numeric_limits<float>::infinity());
    std::fill(run_sum, run_sum + rows, 0.f);
    std::fill(out, out + rows * dim, 0.f);
  }

  // Rows [first, first + count) against one block of n keys (block_t: transposed; value_rows:
  // each key's value row at the head), row first + i seeing the block's first seen(i) keys.
  template <typename Seen>
  void attend(const float* block_t, const float* const* value_rows, int64_t n, int64_t first,
              int64_t count, const Seen& seen) {
    const float* rows_q = q + first * dim;
    float* s = scores + first * kKeys;
    float* p = probs + first * kKeys;
    float* o = out + first * dim;
    in_runs_of<Vec::kScoreRows>(count, [&]<int R>(int64_t i) {
      rows_scores<R>(rows_q + i * dim, dim, block_t, s + i * kKeys);
    });
    for (int64_t i = 0; i < count; ++i) {
      const int64_t visible = std::clamp<int64_t>(seen(i), 0, n);
      online_softmax(s + i * kKeys, p + i * kKeys, visible, run_max[first + i], run_sum[first + i],
                     o + i * dim, dim);
    }
    in_runs_of<Vec::kValueRows>(count, [&]<int R>(int64_t i) {
      rows_values<R>(p + i * kKeys, value_rows, n, dim, o + i * dim);
    });
  }

  // Every row divided by its softmax's sum: the attention's output.
  void finish() {
    for (int64_t i = 0; i < rows; ++i) scale_row(out + i * dim, dim, 1.f / run_sum[i]);
  }
};
#endif

}  // namespace astrai
