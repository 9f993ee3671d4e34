// Decode attention in one call: RoPE on the new token's q and k, its k/v written into the
// cache, then each query head attends over its sequence's cached rows where they lie.
//
// Why: done with torch ops this is ~15 dispatches per layer and a gather that copies every
// sequence's whole context into one padded tensor each step (B x T x heads x dim floats per
// layer, the largest memory traffic of a batch-32 step after the weights). Here the keys and
// values are read in place through the slot table, and a kv head's rows are loaded once for
// all the query heads of its group.
//
// Shapes: qkv (B, (H + 2 KVH) * D) float32, one new token per sequence: q heads, k heads,
// v heads. positions (B,): the new token's position p; it attends to keys 0..p (or the last
// `window` of them), whose cache rows are read_slots[b, 0..p]. k_cache / v_cache
// (slots, KVH, D) float32. cos / sin (positions, D): rotate-half tables, halves duplicated.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops.h"
#include "vec_math.h"

namespace astrai {
namespace {

// x (D,) rotated by the angles of one position, rotate-half convention, into out (D,).
void rope(const float* x, const float* cos, const float* sin, int64_t dim, float* out) {
  const int64_t half = dim / 2;
  for (int64_t d = 0; d < half; ++d) {
    out[d] = x[d] * cos[d] - x[d + half] * sin[d];
    out[d + half] = x[d + half] * cos[d + half] + x[d] * sin[d + half];
  }
}

float dot(const float* a, const float* b, int64_t n) {
#if defined(__AVX2__)
  if (n % 8 == 0) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    if (i < n) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    return hsum(_mm256_add_ps(acc0, acc1));
  }
#endif
  float total = 0.0f;
  for (int64_t i = 0; i < n; ++i) total += a[i] * b[i];
  return total;
}

// scores[0..n) ← exp(scores - max); returns their sum.
float softmax_numerators(float* scores, int64_t n) {
  float top = -INFINITY;
  for (int64_t t = 0; t < n; ++t) top = std::max(top, scores[t]);
  float total = 0.0f;
  int64_t t = 0;
#if defined(__AVX2__)
  __m256 sum8 = _mm256_setzero_ps();
  const __m256 top8 = _mm256_set1_ps(top);
  for (; t + 8 <= n; t += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + t), top8));
    _mm256_storeu_ps(scores + t, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  total = hsum(sum8);
#endif
  for (; t < n; ++t) {
    scores[t] = std::exp(scores[t] - top);
    total += scores[t];
  }
  return total;
}

// out (D,) = sum_t weights[t] * v_cache[rows[t], head] / total.
void weighted_values(const float* v_cache, const int64_t* rows, const float* weights, int64_t n,
                     int64_t row_stride, int64_t dim, float total, float* out) {
  std::fill(out, out + dim, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* v = v_cache + rows[t] * row_stride;
    const float w = weights[t];
    int64_t d = 0;
#if defined(__AVX2__)
    const __m256 w8 = _mm256_set1_ps(w);
    for (; d + 8 <= dim; d += 8)
      _mm256_storeu_ps(out + d, _mm256_fmadd_ps(w8, _mm256_loadu_ps(v + d), _mm256_loadu_ps(out + d)));
#endif
    for (; d < dim; ++d) out[d] += w * v[d];
  }
  const float inv = 1.0f / total;
  for (int64_t d = 0; d < dim; ++d) out[d] *= inv;
}

}  // namespace

at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& positions,
                            const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k_cache,
                            const at::Tensor& v_cache, const at::Tensor& write_slots,
                            const at::Tensor& read_slots, int64_t num_heads, int64_t num_kv_heads,
                            int64_t window) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.scalar_type() == at::kFloat && qkv.is_contiguous(),
              "qkv must be a contiguous (B, (H + 2 KVH) * D) float32 tensor");
  TORCH_CHECK(k_cache.scalar_type() == at::kFloat && v_cache.scalar_type() == at::kFloat &&
                  k_cache.is_contiguous() && v_cache.is_contiguous() && k_cache.dim() == 3,
              "the caches must be contiguous (slots, KVH, D) float32 tensors");
  TORCH_CHECK(num_heads % num_kv_heads == 0, "num_heads must be a multiple of num_kv_heads");
  const int64_t batch = qkv.size(0), dim = k_cache.size(2);
  const int64_t group = num_heads / num_kv_heads;
  TORCH_CHECK(qkv.size(1) == (num_heads + 2 * num_kv_heads) * dim && k_cache.size(1) == num_kv_heads,
              "qkv and cache shapes disagree with the head counts");
  TORCH_CHECK(positions.size(0) == batch && write_slots.size(0) == batch &&
                  read_slots.size(0) == batch,
              "positions, write_slots and read_slots need one row per sequence");
  const at::Tensor pos = positions.to(at::kLong).contiguous();
  const at::Tensor writes = write_slots.to(at::kLong).contiguous();
  const at::Tensor reads = read_slots.to(at::kLong).contiguous();
  const at::Tensor cos_t = cos.contiguous(), sin_t = sin.contiguous();
  const int64_t* p = pos.data_ptr<int64_t>();
  const int64_t* w = writes.data_ptr<int64_t>();
  const int64_t* r = reads.data_ptr<int64_t>();
  const int64_t max_keys = reads.size(1), slots = k_cache.size(0);
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(p[b] >= 0 && p[b] < max_keys && p[b] < cos_t.size(0),
                "position ", p[b], " outside the read slots or the rope table");
    TORCH_CHECK(w[b] >= 0 && w[b] < slots, "write slot ", w[b], " outside the cache");
    for (int64_t t = 0; t <= p[b]; ++t) {
      TORCH_CHECK(r[b * max_keys + t] >= 0 && r[b * max_keys + t] < slots, "read slot outside the cache");
    }
  }
  const float* in = qkv.data_ptr<float>();
  float* kc = k_cache.data_ptr<float>();
  float* vc = v_cache.data_ptr<float>();
  const float* cos_data = cos_t.data_ptr<float>();
  const float* sin_data = sin_t.data_ptr<float>();
  const int64_t row_stride = num_kv_heads * dim, in_stride = qkv.size(1);
  at::Tensor queries = at::empty({batch, num_heads, dim}, qkv.options());
  float* q = queries.data_ptr<float>();
  // Every new k/v is in the cache before any query reads it (a token attends to itself).
  for (int64_t b = 0; b < batch; ++b) {
    const float* row = in + b * in_stride;
    const float* c = cos_data + p[b] * dim;
    const float* s = sin_data + p[b] * dim;
    for (int64_t h = 0; h < num_heads; ++h) rope(row + h * dim, c, s, dim, q + (b * num_heads + h) * dim);
    for (int64_t h = 0; h < num_kv_heads; ++h) {
      rope(row + (num_heads + h) * dim, c, s, dim, kc + w[b] * row_stride + h * dim);
      std::copy_n(row + (num_heads + num_kv_heads + h) * dim, dim, vc + w[b] * row_stride + h * dim);
    }
  }
  at::Tensor out = at::empty({batch, num_heads * dim}, qkv.options());
  float* o = out.data_ptr<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  at::parallel_for(0, batch * num_kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(max_keys);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / num_kv_heads, kvh = item % num_kv_heads;
      const int64_t first = window > 0 ? std::max<int64_t>(0, p[b] - window + 1) : 0;
      const int64_t n = p[b] + 1 - first;
      const int64_t* rows = r + b * max_keys + first;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = kvh * group + g;
        const float* qh = q + (b * num_heads + h) * dim;
        for (int64_t t = 0; t < n; ++t)
          scores[t] = scale * dot(qh, kc + rows[t] * row_stride + kvh * dim, dim);
        const float total = softmax_numerators(scores.data(), n);
        weighted_values(vc + kvh * dim, rows, scores.data(), n, row_stride, dim, total,
                        o + b * num_heads * dim + h * dim);
      }
    }
  });
  return out;
}

TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def(
      "decode_attention(Tensor qkv, Tensor positions, Tensor cos, Tensor sin, Tensor(a!) k_cache, "
      "Tensor(b!) v_cache, Tensor write_slots, Tensor read_slots, int num_heads, "
      "int num_kv_heads, int window) -> Tensor");
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) { m.impl("decode_attention", &decode_attention); }

}  // namespace astrai
