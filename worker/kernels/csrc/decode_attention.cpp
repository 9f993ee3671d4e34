// Decode attention in one call: RoPE on the new token's q and k, its k/v written into the
// cache, then each query head attends over its sequence's cached rows where they lie.
//
// Why: done with torch ops this is ~15 dispatches per layer and a gather that copies every
// sequence's whole context into one padded tensor each step (B x T x heads x dim floats per
// layer, the largest memory traffic of a batch-32 step after the weights). Here the keys and
// values are read in place through the slot table, and the query heads of one kv head go
// together, so each of its rows is loaded once for all of them.
//
// Shapes: qkv (B, (H + 2 KVH) * D) float32, one new token per sequence: q heads, k heads,
// v heads. positions (B,): the new token's position p; it attends to keys 0..p (or the last
// `window` of them), whose cache rows are read_slots[b, 0..p]. k_cache / v_cache
// (slots, KVH, D) float32 or float16, or uint8 (slots, KVH, D / 32 * 34): q8_0 blocks
// (worker/kv/kv_rows.py). cos / sin (positions, D): rotate-half tables, halves duplicated.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "ops.h"
#include "parallel.h"
#include "rope_head.h"
#include "vec_math.h"

namespace astrai {
namespace {

// The cache holds float32 or float16 elements (half the bytes each step reads; an F16C
// instruction widens eight of them), or q8_0 blocks (a quarter: eight codes widened and
// scaled). Written values round to nearest even, as torch's do. A row is read through
// `at(row, d)` accessors, d counting values, so the kernels below serve all three.
struct BlockQ8 {
  c10::Half d;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8) == 34, "q8_0 blocks are ggml's 34 bytes");
constexpr int64_t kQ8Block = 32;

// A head's row of `dim` values takes this many T.
template <typename T>
constexpr int64_t units(int64_t dim) {
  return std::is_same_v<T, BlockQ8> ? dim / kQ8Block : dim;
}

inline float widen_at(const float* row, int64_t d) { return row[d]; }
inline float widen_at(const c10::Half* row, int64_t d) { return static_cast<float>(row[d]); }
inline float widen_at(const BlockQ8* row, int64_t d) {
  const BlockQ8& block = row[d / kQ8Block];
  return static_cast<float>(block.d) * block.qs[d % kQ8Block];
}

// x (dim,) into a cache row: each element narrowed, or quantized a block at a time (the scale
// max |x| / 127 of the block, as ggml's quantize_row_q8_0 and worker/kv/kv_rows.py).
inline void store_row(const float* x, float* row, int64_t dim) { std::copy(x, x + dim, row); }
inline void store_row(const float* x, c10::Half* row, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) row[d] = static_cast<c10::Half>(x[d]);
}
inline void store_row(const float* x, BlockQ8* row, int64_t dim) {
  for (int64_t b = 0; b < dim / kQ8Block; ++b) {
    const float* v = x + b * kQ8Block;
    float amax = 0.0f;
    for (int64_t i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float scale = amax / 127.0f;
    const float inverse = scale > 0.0f ? 1.0f / scale : 0.0f;
    row[b].d = static_cast<c10::Half>(scale);
    for (int64_t i = 0; i < kQ8Block; ++i) {
      row[b].qs[i] = static_cast<int8_t>(std::nearbyint(v[i] * inverse));
    }
  }
}

#if defined(__AVX2__)
inline __m256 load8_at(const float* row, int64_t d) { return _mm256_loadu_ps(row + d); }
inline __m256 load8_at(const c10::Half* row, int64_t d) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d)));
}
inline __m256 load8_at(const BlockQ8* row, int64_t d) {
  const BlockQ8& block = row[d / kQ8Block];
  const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block.qs + d % kQ8Block));
  return _mm256_mul_ps(_mm256_set1_ps(static_cast<float>(block.d)),
                       _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)));
}
#endif

#if defined(__AVX512F__)
inline __m512 load16_at(const float* row, int64_t d) { return _mm512_loadu_ps(row + d); }
inline __m512 load16_at(const c10::Half* row, int64_t d) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + d)));
}
inline __m512 load16_at(const BlockQ8* row, int64_t d) {
  const BlockQ8& block = row[d / kQ8Block];
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block.qs + d % kQ8Block));
  return _mm512_mul_ps(_mm512_set1_ps(static_cast<float>(block.d)),
                       _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes)));
}

// The four sums of a, b, c, d (16 lanes each) in one 4-lane vector: halves folded first.
inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const auto fold = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  };
  const __m256 pairs =
      _mm256_hadd_ps(_mm256_hadd_ps(fold(a), fold(b)), _mm256_hadd_ps(fold(c), fold(d)));
  return _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps(pairs, 1));
}
#endif

// Keys per item of a long context (see attend_batch).
constexpr int64_t kChunkKeys = 256;

#if defined(__AVX2__)
// Rows are read through the slot table, a page at a time, each kv head's part of a row apart
// from the next row's: asked for this many keys ahead, they are in L1 when their turn comes.
constexpr int64_t kAhead = 8;

// Values [first, first + count) of a row: for q8_0, the blocks holding them.
template <typename T>
inline void prefetch_row(const T* row, int64_t count, int64_t first = 0) {
  const int64_t size = static_cast<int64_t>(sizeof(T));
  const int64_t begin = std::is_same_v<T, BlockQ8> ? first / kQ8Block * size : first * size;
  const int64_t end = std::is_same_v<T, BlockQ8> ? (first + count + kQ8Block - 1) / kQ8Block * size
                                                 : (first + count) * size;
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t b = begin; b < end; b += 64) _mm_prefetch(bytes + b, _MM_HINT_T0);
}
#endif

// scores[h][t] = scale * (q[h] . k_cache[rows[t], head]) for the G query heads q[h] (dim
// apart, as are their score rows, `keys` apart) of one kv head, t in [0, n). The heads of a
// group share each load of a key; each score is summed in the same order whatever G is.
template <int G, typename T>
void group_scores(const float* q, const T* k_head, const int64_t* rows, int64_t n,
                  int64_t row_stride, int64_t dim, float scale, float* scores, int64_t keys) {
  int64_t t = 0;
#if defined(__AVX512F__)
  // As below, 16 dimensions an instruction (the 32 registers hold G x 4 sums and 4 keys).
  if (dim % 16 == 0) {
    for (; t + 4 <= n; t += 4) {
      const T* k[4];
      __m512 acc[G][4];
      for (int j = 0; j < 4; ++j) {
        k[j] = k_head + rows[t + j] * row_stride;
        for (int h = 0; h < G; ++h) acc[h][j] = _mm512_setzero_ps();
        if (t + j + kAhead < n) prefetch_row(k_head + rows[t + j + kAhead] * row_stride, dim);
      }
      for (int64_t d = 0; d < dim; d += 16) {
        __m512 kd[4];
        for (int j = 0; j < 4; ++j) kd[j] = load16_at(k[j], d);
        for (int h = 0; h < G; ++h) {
          const __m512 qd = _mm512_loadu_ps(q + h * dim + d);
          for (int j = 0; j < 4; ++j) acc[h][j] = _mm512_fmadd_ps(qd, kd[j], acc[h][j]);
        }
      }
      for (int h = 0; h < G; ++h) {
        const __m128 four = sum4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
        _mm_storeu_ps(scores + h * keys + t, _mm_mul_ps(four, _mm_set1_ps(scale)));
      }
    }
  }
#endif
#if defined(__AVX2__)
  if (dim % 8 == 0) {
    // Four keys at a time share each load of q, and one horizontal reduction gives all four
    // scores: one reduction per key cost as much as the key's multiplications at 64 dims.
    for (; t + 4 <= n; t += 4) {
      const T* k[4];
      __m256 acc[G][4];
      for (int j = 0; j < 4; ++j) {
        k[j] = k_head + rows[t + j] * row_stride;
        for (int h = 0; h < G; ++h) acc[h][j] = _mm256_setzero_ps();
        if (t + j + kAhead < n) prefetch_row(k_head + rows[t + j + kAhead] * row_stride, dim);
      }
      for (int64_t d = 0; d < dim; d += 8) {
        __m256 kd[4];
        for (int j = 0; j < 4; ++j) kd[j] = load8_at(k[j], d);
        for (int h = 0; h < G; ++h) {
          const __m256 qd = _mm256_loadu_ps(q + h * dim + d);
          for (int j = 0; j < 4; ++j) acc[h][j] = _mm256_fmadd_ps(qd, kd[j], acc[h][j]);
        }
      }
      for (int h = 0; h < G; ++h) {
        const __m256 pairs = _mm256_hadd_ps(_mm256_hadd_ps(acc[h][0], acc[h][1]),
                                            _mm256_hadd_ps(acc[h][2], acc[h][3]));
        const __m128 four =
            _mm_add_ps(_mm256_castps256_ps128(pairs), _mm256_extractf128_ps(pairs, 1));
        _mm_storeu_ps(scores + h * keys + t, _mm_mul_ps(four, _mm_set1_ps(scale)));
      }
    }
  }
#endif
  for (; t < n; ++t) {
    const T* k = k_head + rows[t] * row_stride;
    for (int h = 0; h < G; ++h) {
      float total = 0.0f;
      for (int64_t d = 0; d < dim; ++d) total += q[h * dim + d] * widen_at(k, d);
      scores[h * keys + t] = scale * total;
    }
  }
}

// scores[0..n) ← exp(scores - max); returns their sum (and the max, where asked).
float softmax_numerators(float* scores, int64_t n, float* max_out = nullptr) {
  float top = -INFINITY;
  for (int64_t t = 0; t < n; ++t) top = std::max(top, scores[t]);
  if (max_out != nullptr) *max_out = top;
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

#if defined(__AVX2__)
// out[h][0, 8V) = inv[h] * sum_t weights[h][t] * v[rows[t]][0, 8V) for G heads (weights rows
// `keys` apart, out rows `dim` apart), the sums held in G x V registers (writing them back to
// memory after every key made the loop store-bound); each value row is loaded once for the G.
template <int G, int V, typename T>
void weighted_columns(const T* v_head, int64_t col, const int64_t* rows, const float* weights,
                      int64_t n, int64_t keys, int64_t row_stride, const float* inv, float* out,
                      int64_t dim) {
  __m256 acc[G][V];
  for (int h = 0; h < G; ++h)
    for (int j = 0; j < V; ++j) acc[h][j] = _mm256_setzero_ps();
  for (int64_t t = 0; t < n; ++t) {
    const T* v = v_head + rows[t] * row_stride;
    if (t + kAhead < n) prefetch_row(v_head + rows[t + kAhead] * row_stride, 8 * V, col);
    __m256 vt[V];
    for (int j = 0; j < V; ++j) vt[j] = load8_at(v, col + 8 * j);
    for (int h = 0; h < G; ++h) {
      const __m256 w = _mm256_set1_ps(weights[h * keys + t]);
      for (int j = 0; j < V; ++j) acc[h][j] = _mm256_fmadd_ps(w, vt[j], acc[h][j]);
    }
  }
  for (int h = 0; h < G; ++h) {
    const __m256 scale = _mm256_set1_ps(inv[h]);
    for (int j = 0; j < V; ++j)
      _mm256_storeu_ps(out + h * dim + 8 * j, _mm256_mul_ps(acc[h][j], scale));
  }
}
#endif

#if defined(__AVX512F__)
// weighted_columns with 16 lanes: out[h][0, 16V) for G heads, the same sums in the same order.
template <int G, int V, typename T>
void weighted_columns_wide(const T* v_head, int64_t col, const int64_t* rows, const float* weights,
                           int64_t n, int64_t keys, int64_t row_stride, const float* inv,
                           float* out, int64_t dim) {
  __m512 acc[G][V];
  for (int h = 0; h < G; ++h)
    for (int j = 0; j < V; ++j) acc[h][j] = _mm512_setzero_ps();
  for (int64_t t = 0; t < n; ++t) {
    const T* v = v_head + rows[t] * row_stride;
    if (t + kAhead < n) prefetch_row(v_head + rows[t + kAhead] * row_stride, 16 * V, col);
    __m512 vt[V];
    for (int j = 0; j < V; ++j) vt[j] = load16_at(v, col + 16 * j);
    for (int h = 0; h < G; ++h) {
      const __m512 w = _mm512_set1_ps(weights[h * keys + t]);
      for (int j = 0; j < V; ++j) acc[h][j] = _mm512_fmadd_ps(w, vt[j], acc[h][j]);
    }
  }
  for (int h = 0; h < G; ++h) {
    const __m512 scale = _mm512_set1_ps(inv[h]);
    for (int j = 0; j < V; ++j) {
      _mm512_storeu_ps(out + h * dim + 16 * j, _mm512_mul_ps(acc[h][j], scale));
    }
  }
}
#endif

// out[h] (D,) = sum_t weights[h][t] * v_cache[rows[t], head] / totals[h] for G heads. Each
// output is summed over t in order, so the column width per pass does not change it.
template <int G, typename T>
void group_values(const T* v_head, const int64_t* rows, const float* weights, int64_t n,
                  int64_t keys, int64_t row_stride, int64_t dim, const float* totals, float* out) {
  float inv[G];
  for (int h = 0; h < G; ++h) inv[h] = 1.0f / totals[h];
  int64_t d = 0;
#if defined(__AVX512F__)
  // 64 columns a pass (a 64-dim head in one pass over its rows: G x 4 sums, 4 value vectors).
  for (; d + 64 <= dim; d += 64) {
    weighted_columns_wide<G, 4>(v_head, d, rows, weights, n, keys, row_stride, inv, out + d, dim);
  }
  for (; d + 16 <= dim; d += 16) {
    weighted_columns_wide<G, 1>(v_head, d, rows, weights, n, keys, row_stride, inv, out + d, dim);
  }
#endif
#if defined(__AVX2__)
  // As many columns per pass as keep G x V sums and V value vectors in the 16 registers.
  constexpr int kWide = G == 1 ? 8 : G == 2 ? 4 : 2;
  for (; d + 8 * kWide <= dim; d += 8 * kWide) {
    weighted_columns<G, kWide>(v_head, d, rows, weights, n, keys, row_stride, inv, out + d, dim);
  }
  for (; d + 8 <= dim; d += 8) {
    weighted_columns<G, 1>(v_head, d, rows, weights, n, keys, row_stride, inv, out + d, dim);
  }
#endif
  for (; d < dim; ++d) {
    for (int h = 0; h < G; ++h) {
      float sum = 0.0f;
      for (int64_t t = 0; t < n; ++t) {
        sum += weights[h * keys + t] * widen_at(v_head + rows[t] * row_stride, d);
      }
      out[h * dim + d] = sum * inv[h];
    }
  }
}

// G query heads (q and out rows `dim` apart) over one kv head's rows; scores: G x keys floats.
template <int G, typename T>
void attend(const float* q, const T* k_head, const T* v_head, const int64_t* rows, int64_t n,
            int64_t row_stride, int64_t dim, float scale, float* scores, int64_t keys, float* out) {
  group_scores<G>(q, k_head, rows, n, row_stride, dim, scale, scores, keys);
  float totals[G];
  for (int h = 0; h < G; ++h) totals[h] = softmax_numerators(scores + h * keys, n);
  group_values<G>(v_head, rows, scores, n, keys, row_stride, dim, totals, out);
}

// attend over one chunk of a long context's keys, for merging: out[h] the weighted values
// not yet divided (totals of 1), maxes[h] and sums[h] the chunk's softmax max and sum.
template <int G, typename T>
void attend_chunk(const float* q, const T* k_head, const T* v_head, const int64_t* rows, int64_t n,
                  int64_t row_stride, int64_t dim, float scale, float* scores, int64_t keys,
                  float* out, float* maxes, float* sums) {
  group_scores<G>(q, k_head, rows, n, row_stride, dim, scale, scores, keys);
  float ones[G];
  for (int h = 0; h < G; ++h) {
    sums[h] = softmax_numerators(scores + h * keys, n, maxes + h);
    ones[h] = 1.0f;
  }
  group_values<G>(v_head, rows, scores, n, keys, row_stride, dim, ones, out);
}

// attend_chunk for `group` query heads (1 to 3 at a time, as attend_heads goes).
template <typename T>
void attend_chunk_heads(int64_t group, const float* q, const T* k_head, const T* v_head,
                        const int64_t* rows, int64_t n, int64_t row_stride, int64_t dim,
                        float scale, float* scores, int64_t keys, float* out, float* maxes,
                        float* sums) {
  for (int64_t h = 0; h < group;) {
    const int64_t left = group - h;
    const float* qh = q + h * dim;
    float* oh = out + h * dim;
    if (left >= 3) {
      attend_chunk<3>(qh, k_head, v_head, rows, n, row_stride, dim, scale, scores, keys, oh,
                      maxes + h, sums + h);
      h += 3;
    } else if (left == 2) {
      attend_chunk<2>(qh, k_head, v_head, rows, n, row_stride, dim, scale, scores, keys, oh,
                      maxes + h, sums + h);
      h += 2;
    } else {
      attend_chunk<1>(qh, k_head, v_head, rows, n, row_stride, dim, scale, scores, keys, oh,
                      maxes + h, sums + h);
      h += 1;
    }
  }
}

// `count` consecutive query heads of one kv head, three at a time where there are three.
template <typename T>
void attend_heads(int64_t count, const float* q, const T* k_head, const T* v_head,
                  const int64_t* rows, int64_t n, int64_t row_stride, int64_t dim, float scale,
                  float* scores, int64_t keys, float* out) {
  for (int64_t h = 0; h < count;) {
    const int64_t left = count - h;
    const float* qh = q + h * dim;
    float* oh = out + h * dim;
    if (left >= 3) {
      attend<3>(qh, k_head, v_head, rows, n, row_stride, dim, scale, scores, keys, oh);
      h += 3;
    } else if (left == 2) {
      attend<2>(qh, k_head, v_head, rows, n, row_stride, dim, scale, scores, keys, oh);
      h += 2;
    } else {
      attend<1>(qh, k_head, v_head, rows, n, row_stride, dim, scale, scores, keys, oh);
      h += 1;
    }
  }
}

template <typename T>
at::Tensor attend_batch(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& cos,
                        const at::Tensor& sin, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& write_slots, const at::Tensor& read_slots,
                        int64_t num_heads, int64_t num_kv_heads, int64_t window) {
  TORCH_CHECK(num_heads % num_kv_heads == 0, "num_heads must be a multiple of num_kv_heads");
  const int64_t batch = qkv.size(0);
  const int64_t width = k_cache.size(2);  // values, or q8_0 bytes
  const int64_t dim = std::is_same_v<T, BlockQ8> ? width / 34 * kQ8Block : width;
  const int64_t head_units = units<T>(dim);  // a head's row in T
  const int64_t group = num_heads / num_kv_heads;
  TORCH_CHECK(
      qkv.size(1) == (num_heads + 2 * num_kv_heads) * dim && k_cache.size(1) == num_kv_heads,
      "qkv and cache shapes disagree with the head counts");
  TORCH_CHECK(
      positions.size(0) == batch && write_slots.size(0) == batch && read_slots.size(0) == batch,
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
    TORCH_CHECK(p[b] >= 0 && p[b] < max_keys && p[b] < cos_t.size(0), "position ", p[b],
                " outside the read slots or the rope table");
    TORCH_CHECK(w[b] >= 0 && w[b] < slots, "write slot ", w[b], " outside the cache");
    for (int64_t t = 0; t <= p[b]; ++t) {
      TORCH_CHECK(r[b * max_keys + t] >= 0 && r[b * max_keys + t] < slots,
                  "read slot outside the cache");
    }
  }
  const float* in = qkv.data_ptr<float>();
  T* kc = reinterpret_cast<T*>(k_cache.data_ptr());
  T* vc = reinterpret_cast<T*>(v_cache.data_ptr());
  const float* cos_data = cos_t.data_ptr<float>();
  const float* sin_data = sin_t.data_ptr<float>();
  const int64_t row_stride = num_kv_heads * head_units, in_stride = qkv.size(1);
  at::Tensor queries = at::empty({batch, num_heads, dim}, qkv.options());
  float* q = queries.data_ptr<float>();
  // Every new k/v is in the cache before any query reads it (a token attends to itself).
  std::vector<float> rotated(dim);
  for (int64_t b = 0; b < batch; ++b) {
    const float* row = in + b * in_stride;
    const float* c = cos_data + p[b] * dim;
    const float* s = sin_data + p[b] * dim;
    for (int64_t h = 0; h < num_heads; ++h)
      rope_head(row + h * dim, c, s, dim, q + (b * num_heads + h) * dim);
    for (int64_t h = 0; h < num_kv_heads; ++h) {
      rope_head(row + (num_heads + h) * dim, c, s, dim, rotated.data());
      store_row(rotated.data(), kc + w[b] * row_stride + h * head_units, dim);
      const float* v = row + (num_heads + num_kv_heads + h) * dim;
      store_row(v, vc + w[b] * row_stride + h * head_units, dim);
    }
  }
  at::Tensor out = at::empty({batch, num_heads * dim}, qkv.options());
  float* o = out.data_ptr<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  // A context longer than kChunkKeys is split into chunks of that many keys, each an item of
  // all the query heads of one kv head (so each row is read once, not once per query head,
  // and a lone long sequence still spreads over every thread); the chunks' softmax parts are
  // merged after. The split depends only on the sequence's own length: its result is the same
  // whatever the batch around it and the threads.
  std::vector<int64_t> first_key(batch), num_keys(batch), first_part(batch, -1);
  int64_t num_parts = 0;
  std::vector<int64_t> short_seqs, part_seq;  // part_seq: each part's sequence
  for (int64_t b = 0; b < batch; ++b) {
    first_key[b] = window > 0 ? std::max<int64_t>(0, p[b] - window + 1) : 0;
    num_keys[b] = p[b] + 1 - first_key[b];
    if (num_keys[b] > kChunkKeys) {
      first_part[b] = num_parts;
      num_parts += num_kv_heads * ((num_keys[b] + kChunkKeys - 1) / kChunkKeys);
      part_seq.resize(num_parts, b);
    } else {
      short_seqs.push_back(b);
    }
  }
  // Each part: the group's unnormalised outputs, then their maxes, then their sums.
  const int64_t part_floats = group * (dim + 2);
  std::vector<float> parts(num_parts * part_floats);
  const int64_t num_short = static_cast<int64_t>(short_seqs.size());
  // Short contexts: items handed out as threads free up (sequences differ in length), as
  // large as still gives each thread four or more: a whole sequence (its rows read in order,
  // every kv head), else one kv head's query heads (each of its rows loaded once for all of
  // them), else one query head (at one sequence, kv-head items left a thread idle for a third
  // of the layer). Every output is the same sum in the same order whichever the items are.
  const int64_t threads = at::get_num_threads();
  const int64_t per_item = num_short >= 4 * threads                  ? num_heads
                           : num_short * num_kv_heads >= 4 * threads ? group
                                                                     : 1;
  const int64_t short_items = num_short * num_heads / per_item;
  const int64_t items = num_parts + short_items;
  parallel_chunks(items, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    scores.resize(group * std::max<int64_t>(max_keys, kChunkKeys));
    for (int64_t item = begin; item < end; ++item) {
      if (item < num_parts) {  // one chunk of a long context, one kv head
        const int64_t b = part_seq[item];
        const int64_t local = item - first_part[b];
        const int64_t kvh = local % num_kv_heads, chunk = local / num_kv_heads;
        const int64_t start = first_key[b] + chunk * kChunkKeys;
        const int64_t n = std::min(kChunkKeys, p[b] + 1 - start);
        float* part = parts.data() + item * part_floats;
        attend_chunk_heads(group, q + (b * num_heads + kvh * group) * dim, kc + kvh * head_units,
                           vc + kvh * head_units, r + b * max_keys + start, n, row_stride, dim,
                           scale, scores.data(), kChunkKeys, part, part + group * dim,
                           part + group * (dim + 1));
        continue;
      }
      const int64_t head0 = (item - num_parts) * per_item;  // over the short sequences' heads
      const int64_t b = short_seqs[head0 / num_heads];
      const int64_t n = num_keys[b];
      const int64_t* rows = r + b * max_keys + first_key[b];
      for (int64_t head = head0; head < head0 + per_item;) {
        const int64_t h = head % num_heads, kvh = h / group;
        const int64_t count = std::min(per_item, group - h % group);
        const int64_t at = b * num_heads + h;
        attend_heads(count, q + at * dim, kc + kvh * head_units, vc + kvh * head_units, rows, n,
                     row_stride, dim, scale, scores.data(), max_keys, o + at * dim);
        head += count;
      }
    }
  });
  // Merge a long context's chunks per query head: each chunk's sum and outputs scaled by
  // exp(its max - the largest max), in chunk order.
  for (int64_t b = 0; b < batch; ++b) {
    if (first_part[b] < 0) continue;
    const int64_t chunks = (num_keys[b] + kChunkKeys - 1) / kChunkKeys;
    for (int64_t h = 0; h < num_heads; ++h) {
      const int64_t kvh = h / group, g = h % group;
      const auto part_of = [&](int64_t c) {
        return parts.data() + (first_part[b] + c * num_kv_heads + kvh) * part_floats;
      };
      float top = -INFINITY;
      for (int64_t c = 0; c < chunks; ++c) top = std::max(top, part_of(c)[group * dim + g]);
      float* dst = o + (b * num_heads + h) * dim;
      std::fill(dst, dst + dim, 0.0f);
      float total = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) {
        const float* part = part_of(c);
        const float weight = std::exp(part[group * dim + g] - top);
        total += weight * part[group * (dim + 1) + g];
        const float* values = part + g * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] += weight * values[d];
      }
      const float inv = 1.0f / total;
      for (int64_t d = 0; d < dim; ++d) dst[d] *= inv;
    }
  }
  return out;
}

}  // namespace

at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& positions,
                            const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k_cache,
                            const at::Tensor& v_cache, const at::Tensor& write_slots,
                            const at::Tensor& read_slots, int64_t num_heads, int64_t num_kv_heads,
                            int64_t window) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.scalar_type() == at::kFloat && qkv.is_contiguous(),
              "qkv must be a contiguous (B, (H + 2 KVH) * D) float32 tensor");
  const auto kind = k_cache.scalar_type();
  TORCH_CHECK((kind == at::kFloat || kind == at::kHalf || kind == at::kByte) &&
                  v_cache.scalar_type() == kind && k_cache.is_contiguous() &&
                  v_cache.is_contiguous() && k_cache.dim() == 3,
              "the caches must be contiguous (slots, KVH, D) tensors, both float32, float16 or "
              "q8_0 (uint8)");
  if (kind == at::kByte) {
    TORCH_CHECK(k_cache.size(2) % 34 == 0, "q8_0 cache rows must be whole 34-byte blocks");
    return attend_batch<BlockQ8>(qkv, positions, cos, sin, k_cache, v_cache, write_slots,
                                 read_slots, num_heads, num_kv_heads, window);
  }
  if (kind == at::kHalf) {
    return attend_batch<c10::Half>(qkv, positions, cos, sin, k_cache, v_cache, write_slots,
                                   read_slots, num_heads, num_kv_heads, window);
  }
  return attend_batch<float>(qkv, positions, cos, sin, k_cache, v_cache, write_slots, read_slots,
                             num_heads, num_kv_heads, window);
}

TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def(
      "decode_attention(Tensor qkv, Tensor positions, Tensor cos, Tensor sin, Tensor(a!) k_cache, "
      "Tensor(b!) v_cache, Tensor write_slots, Tensor read_slots, int num_heads, "
      "int num_kv_heads, int window) -> Tensor");
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) { m.impl("decode_attention", &decode_attention); }

}  // namespace astrai
