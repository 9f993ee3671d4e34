// Causal attention of a prefill chunk over its sequence's keys, float32, blocked for AVX-512.
//
// Why: torch's CPU flash kernel, given the chunk's causal mask as a tensor, reads a mask value
// for every score and computes at about half the cores' FMA rate; past a few thousand tokens
// attention is most of a prefill (docs/BENCHMARKS.md, "The native causal prefill
// attention"). Here a block of query rows meets a block of keys in registers: scores by
// broadcasting each query element against a transposed key block, the softmax online (a
// running max and sum per row), the values accumulated the same way, and the causal limit
// read from the positions.
//
// Shapes: queries (KVH, R, D), the rows of one kv head's query heads, row r = q * G + g for
// query q and group member g, the queries being the last R / G of the sequence's T keys;
// keys, values (T, KVH, D). Row r sees keys 0 .. T - R / G + r / G. Out (KVH, R, D).

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "parallel.h"
#include "vec_math.h"

namespace astrai {
namespace {

#if defined(__AVX512F__)
constexpr int64_t kRows = 6;       // query rows a micro-kernel holds
constexpr int64_t kBlockRows = 48;  // query rows a task takes
constexpr int64_t kKeys = 64;       // keys a block holds: 4 vectors of scores per row

// e^x for 16 floats (exp8's method, vec_math.h).
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)), _mm512_set1_ps(88.72283f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  const __m512i pow2 =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(pow2));
}

// scores[i][0..64) = q_i . keys[j], for R rows; key_t (D, 64): the block's keys transposed.
template <int R>
inline void block_scores(const float* q, int64_t q_stride, const float* key_t, int64_t dim,
                         float* scores) {
  __m512 acc[R][4];
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < 4; ++c) acc[i][c] = _mm512_setzero_ps();
  }
  for (int64_t d = 0; d < dim; ++d) {
    const float* kt = key_t + d * kKeys;
    const __m512 k0 = _mm512_loadu_ps(kt), k1 = _mm512_loadu_ps(kt + 16);
    const __m512 k2 = _mm512_loadu_ps(kt + 32), k3 = _mm512_loadu_ps(kt + 48);
    for (int i = 0; i < R; ++i) {
      const __m512 b = _mm512_set1_ps(q[i * q_stride + d]);
      acc[i][0] = _mm512_fmadd_ps(b, k0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(b, k1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(b, k2, acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(b, k3, acc[i][3]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(scores + i * kKeys + c * 16, acc[i][c]);
  }
}

// out_i[d0 .. d0 + 16 NV) += sum_j probs[i][j] values[j][d0 ..], over `keys` keys, R rows.
template <int R, int NV>
inline void block_values(const float* probs, const float* values, int64_t v_stride,
                         int64_t keys, float* out, int64_t out_stride) {
  __m512 acc[R][NV];
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NV; ++c) acc[i][c] = _mm512_loadu_ps(out + i * out_stride + c * 16);
  }
  for (int64_t j = 0; j < keys; ++j) {
    __m512 v[NV];
    for (int c = 0; c < NV; ++c) v[c] = _mm512_loadu_ps(values + j * v_stride + c * 16);
    for (int i = 0; i < R; ++i) {
      const __m512 p = _mm512_set1_ps(probs[i * kKeys + j]);
      for (int c = 0; c < NV; ++c) acc[i][c] = _mm512_fmadd_ps(p, v[c], acc[i][c]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(out + i * out_stride + c * 16, acc[i][c]);
  }
}

template <int R>
void rows_values(const float* probs, const float* values, int64_t v_stride, int64_t keys,
                 int64_t dim, float* out) {
  int64_t d0 = 0;
  for (; d0 + 64 <= dim; d0 += 64) {
    block_values<R, 4>(probs, values + d0, v_stride, keys, out + d0, dim);
  }
  for (; d0 < dim; d0 += 16) {
    block_values<R, 1>(probs, values + d0, v_stride, keys, out + d0, dim);
  }
}

// The R-row micro-kernels for R = 1 .. kRows, picked at run time for a block's last rows.
template <typename F>
void with_rows(int64_t rows, const F& f) {
  switch (rows) {
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    default: f(std::integral_constant<int, 1>{}); break;
  }
}

// key_t (T / 64 blocks, D, 64) of one kv head: each block of keys transposed, zeros past T.
void transpose_keys(const float* k, int64_t key_stride, int64_t total, int64_t dim,
                    int64_t block, float* key_t) {
  const int64_t key0 = block * kKeys, n = std::min(kKeys, total - key0);
  float* out = key_t + block * dim * kKeys;
  for (int64_t j = 0; j < n; ++j) {
    const float* row = k + (key0 + j) * key_stride;
    for (int64_t d = 0; d < dim; ++d) out[d * kKeys + j] = row[d];
  }
  for (int64_t d = 0; d < dim; ++d) std::fill(out + d * kKeys + n, out + (d + 1) * kKeys, 0.f);
}

// One kv head's rows [row0, row0 + rows) over the keys they see; q pre-scaled by D^-0.5.
void attend_block(const float* q, const float* key_t, const float* v, int64_t key_stride,
                  int64_t dim, int64_t first_query_pos, int64_t group, int64_t row0, int64_t rows,
                  float* out) {
  float scores[kBlockRows * kKeys], probs[kBlockRows * kKeys];
  float run_max[kBlockRows], run_sum[kBlockRows];
  std::fill(run_max, run_max + rows, -std::numeric_limits<float>::infinity());
  std::fill(run_sum, run_sum + rows, 0.f);
  std::fill(out, out + rows * dim, 0.f);
  const int64_t keys_seen = first_query_pos + (row0 + rows - 1) / group + 1;
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t key0 = 0; key0 < keys_seen; key0 += kKeys) {
    const int64_t n = std::min(kKeys, keys_seen - key0);
    const float* block_t = key_t + (key0 / kKeys) * dim * kKeys;
    for (int64_t i = 0; i < rows; i += kRows) {
      with_rows(std::min(kRows, rows - i), [&](auto r) {
        block_scores<decltype(r)::value>(q + (row0 + i) * dim, dim, block_t, dim,
                                         scores + i * kKeys);
      });
    }
    for (int64_t i = 0; i < rows; ++i) {  // the online softmax, row by row
      const int64_t last = first_query_pos + (row0 + i) / group;  // the last key it sees
      const int64_t seen = std::clamp<int64_t>(last - key0 + 1, 0, n);
      float* s = scores + i * kKeys;
      float* p = probs + i * kKeys;
      __m512 x[4];
      __m512 top = minus_inf;
      for (int c = 0; c < 4; ++c) {
        const int64_t live = std::clamp<int64_t>(seen - c * 16, 0, 16);
        const __mmask16 lanes = static_cast<__mmask16>((1u << live) - 1);
        x[c] = _mm512_mask_loadu_ps(minus_inf, lanes, s + c * 16);
        top = _mm512_max_ps(top, x[c]);
      }
      const float new_max = std::max(run_max[i], _mm512_reduce_max_ps(top));
      const float rescale = std::exp(run_max[i] - new_max);  // 0 for the first block
      const __m512 m = _mm512_set1_ps(new_max);
      __m512 sum = _mm512_setzero_ps();
      for (int c = 0; c < 4; ++c) {  // e^-inf: 0 for the keys it does not see
        const __m512 e = exp16(_mm512_sub_ps(x[c], m));
        const __mmask16 seen_lanes = _mm512_cmp_ps_mask(x[c], minus_inf, _CMP_NEQ_OQ);
        const __m512 kept = _mm512_maskz_mov_ps(seen_lanes, e);
        _mm512_storeu_ps(p + c * 16, kept);
        sum = _mm512_add_ps(sum, kept);
      }
      run_sum[i] = run_sum[i] * rescale + _mm512_reduce_add_ps(sum);
      run_max[i] = new_max;
      if (rescale != 1.f) {
        float* o = out + i * dim;
        const __m512 f = _mm512_set1_ps(rescale);
        for (int64_t d = 0; d < dim; d += 16) {
          _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), f));
        }
      }
    }
    for (int64_t i = 0; i < rows; i += kRows) {
      with_rows(std::min(kRows, rows - i), [&](auto r) {
        rows_values<decltype(r)::value>(probs + i * kKeys, v + key0 * key_stride, key_stride, n,
                                        dim, out + i * dim);
      });
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    const __m512 inv = _mm512_set1_ps(1.f / run_sum[i]);
    float* o = out + i * dim;
    for (int64_t d = 0; d < dim; d += 16) {
      _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), inv));
    }
  }
}
#endif

bool prefill_attention_available() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

at::Tensor prefill_attention(const at::Tensor& queries, const at::Tensor& keys,
                             const at::Tensor& values, int64_t group) {
  TORCH_CHECK(prefill_attention_available(), "prefill_attention needs AVX-512");
  TORCH_CHECK(queries.dim() == 3 && keys.dim() == 3 && values.sizes() == keys.sizes(),
              "queries (KVH, R, D), keys and values (T, KVH, D)");
  TORCH_CHECK(queries.scalar_type() == at::kFloat && keys.scalar_type() == at::kFloat &&
                  values.scalar_type() == at::kFloat,
              "float32 queries, keys and values");
  TORCH_CHECK(queries.is_contiguous() && keys.is_contiguous() && values.is_contiguous(),
              "contiguous queries, keys and values");
  const int64_t kv_heads = queries.size(0), rows = queries.size(1), dim = queries.size(2);
  const int64_t total_keys = keys.size(0);
  TORCH_CHECK(keys.size(1) == kv_heads && keys.size(2) == dim && dim % 16 == 0,
              "keys (T, KVH, D) with the queries' KVH and D, D a multiple of 16");
  TORCH_CHECK(group >= 1 && rows % group == 0 && rows / group <= total_keys,
              "R a multiple of the group, its queries no more than the keys");
  at::Tensor out = at::empty({kv_heads, rows, dim}, queries.options());
#if defined(__AVX512F__)
  const int64_t first_query_pos = total_keys - rows / group;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int64_t key_blocks = (total_keys + kKeys - 1) / kKeys;
  // Scaled once here rather than every score; the keys transposed once per head, not once
  // per block of query rows that reads them.
  const at::Tensor scaled = queries.mul(1.0 / std::sqrt(static_cast<double>(dim)));
  at::Tensor key_t = at::empty({kv_heads, key_blocks * dim * kKeys}, queries.options());
  const float* q = scaled.data_ptr<float>();
  const float* k = keys.data_ptr<float>();
  const float* v = values.data_ptr<float>();
  float* kt = key_t.data_ptr<float>();
  float* o = out.data_ptr<float>();
  parallel_chunks(kv_heads * key_blocks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t head = task / key_blocks;
      transpose_keys(k + head * dim, kv_heads * dim, total_keys, dim, task % key_blocks,
                     kt + head * key_blocks * dim * kKeys);
    }
  });
  // The last blocks see the most keys: taken first, they do not end the call on one thread.
  parallel_chunks(kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t head = task % kv_heads, block = blocks - 1 - task / kv_heads;
      const int64_t row0 = block * kBlockRows, n = std::min(kBlockRows, rows - row0);
      attend_block(q + head * rows * dim, kt + head * key_blocks * dim * kKeys, v + head * dim,
                   kv_heads * dim, dim, first_query_pos, group, row0, n,
                   o + (head * rows + row0) * dim);
    }
  });
#endif
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def("prefill_attention(Tensor queries, Tensor keys, Tensor values, int group) -> Tensor");
  m.def("prefill_attention_available() -> bool", &prefill_attention_available);
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) { m.impl("prefill_attention", &prefill_attention); }

}  // namespace astrai
